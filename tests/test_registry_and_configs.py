"""The registry and the Hydra config groups agree; bad registrations fail loudly."""
from pathlib import Path

import pytest

from conftest import REPO, compose_run
from zoo import registry
from zoo.parser import Parser

registry.load_all()


def config_names(group: str) -> set[str]:
    return {p.stem for p in (REPO / "configs" / group).glob("*.yaml") if not p.stem.startswith("_")}


@pytest.mark.parametrize("group, table", [("model", registry.MODELS), ("data", registry.DATASETS)])
def test_every_registered_name_has_a_config_and_back(group, table):
    """Each registered name has its config; any further config is a preset of a registered one (bert2bert_minilm
    is seq2seq with another backbone)."""
    assert set(table) <= config_names(group)
    for name in config_names(group):
        composed = compose_run(f"{group}={name}")[group].name
        assert composed == name if name in table else composed in table


def test_design_dataset_names_are_registered():
    expected = {f"scan_{s}" for s in ("simple", "length", "addjump", "turn_left", "around_right", "right",
                                      "mcd1", "mcd2", "mcd3")}
    expected |= {"scan_sp_simple", "scan_sp_right", "scan_sp_around_right", "geo_funql_iid", "geo_funql_template",
                 "geo_funql_length", "cogs", "cogs_gen", "cfq_mcd1", "cfq_mcd2", "cfq_mcd3", "cfq_random",
                 "cfq_mcd2_partial", "cfq_mcd3_partial", "cfq_random_partial"}
    expected |= {f"{d}_sql_{s}" for d in ("geo", "atis", "scholar") for s in ("iid", "template")}
    assert expected <= set(registry.DATASETS)


def test_every_group_composes():
    for group in ("trainer", "logger", "callbacks", "debug", "experiment"):
        for name in config_names(group):
            compose_run(f"{group}={name}")


def test_every_experiment_stays_a_smoke_test_under_debug_smoke():
    """debug=smoke comes after the experiment, so a recipe's budget (max_steps 6000) never outlasts the smoke's."""
    for name in config_names("experiment"):
        cfg = compose_run(f"experiment={name}", "debug=smoke")
        assert cfg.trainer.max_steps == 4 and cfg.data.limit_train == 32 and cfg.data.batch_size == 8, name


def test_duplicate_and_wrong_base_class_are_errors():
    with pytest.raises(registry.RegistryError, match="already registered"):
        registry.register_model("seq2seq")(type("Another", (Parser,), {}))
    with pytest.raises(TypeError, match="subclass of zoo.parser.Parser"):
        registry.register_model("not_a_parser")(object)
    with pytest.raises(registry.RegistryError, match="already registered"):
        registry.register_dataset("scan_simple", formalism="scan")(lambda root: {})
    with pytest.raises(registry.RegistryError, match="unknown formalism"):
        registry.register_dataset("new_dataset", formalism="klingon")(lambda root: {})
    assert "not_a_parser" not in registry.MODELS and "new_dataset" not in registry.DATASETS


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(registry.RegistryError, match="registered models: .*seq2seq"):
        registry.get_model("transformer_xl")
    with pytest.raises(registry.RegistryError, match="registered datasets: .*scan_simple"):
        registry.get_dataset("scan_nope")


def test_an_unknown_name_on_the_command_line_lists_the_options():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException) as error:
        compose_run("model=ggd_typo")
    assert error.value.options and "seq2seq" in error.value.options
    with pytest.raises(MissingConfigException) as error:
        compose_run("data=scan_nope")
    assert "scan_simple" in error.value.options
