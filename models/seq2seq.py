"""Seq2seq baseline: a T5 encoder-decoder (Raffel et al. 2020) over word-level tokens.

The baseline of every paper in the zoo (Herzig et al. 2021 §4 trains T5 on programs and on intermediate
representations; Herzig & Berant 2021 and Gai et al. 2021 compare against seq2seq). Built from a preset with
random initialisation, or loaded from a pretrained T5 (a local directory or a hub name) together with its
tokenizer. Decoding is greedy (``num_beams=1``) or beam search.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

from zoo.parser import Featurizer, Parser
from zoo.registry import register_model
from zoo.types import Example

# T5's conventions: the decoder starts from <pad>; </s> ends every sequence.
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"

PRESETS: dict[str, dict[str, int]] = {
    # For tests: trains in seconds.
    "tiny": dict(d_model=64, d_ff=128, num_layers=1, num_decoder_layers=1, num_heads=4, d_kv=16),
    # For CPU benchmarks: about 1.5M parameters besides the embeddings.
    "mini": dict(d_model=128, d_ff=512, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=32),
    # T5-small dimensions (Raffel et al. 2020), the scratch model of Herzig et al. 2021 Table 4.
    "small": dict(d_model=512, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8, d_kv=64),
}


class Seq2SeqFeaturizer(Featurizer):
    """Utterance and program to token ids with one shared vocabulary.

    From scratch: a word-level vocabulary learned on the training split (``tokenizers`` WordLevel over
    whitespace-split tokens), since these programs are already tokenised. With ``pretrained``: the
    pretrained model's own tokenizer.
    """

    def __init__(self, pretrained: str | None = None, max_source_length: int = 512, max_target_length: int = 512):
        self.pretrained = pretrained
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.tokenizer: Tokenizer | None = None
        self.longest_train_target = 0

    def fit(self, examples: Sequence[Example], world: Any = None) -> "Seq2SeqFeaturizer":
        if self.pretrained:
            self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained).backend_tokenizer
        else:
            tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
            tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            trainer = trainers.WordLevelTrainer(special_tokens=[PAD, EOS, UNK], min_frequency=1, show_progress=False)
            tokenizer.train_from_iterator((text for ex in examples for text in (ex.utterance, ex.program)), trainer)
            self.tokenizer = tokenizer
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.longest_train_target = max((len(self.ids(ex.program)) for ex in examples), default=0)
        return self

    # Ids of the special tokens, read from the vocabulary so pretrained tokenizers work unchanged.
    @property
    def pad_id(self) -> int:
        return self.tokenizer.token_to_id(PAD)

    @property
    def eos_id(self) -> int:
        return self.tokenizer.token_to_id(EOS)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def ids(self, text: str, max_length: int | None = None) -> list[int]:
        """Token ids of ``text`` ending in </s>, cut to ``max_length`` at the end (the start is what matters)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if max_length is not None:
            ids = ids[: max_length - 1]
        return ids + [self.eos_id]

    def encode(self, example: Example) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.tensor(self.ids(example.utterance, self.max_source_length)),
                "labels": torch.tensor(self.ids(example.program, self.max_target_length))}

    def collate(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        input_ids = pad_sequence([it["input_ids"] for it in items], batch_first=True, padding_value=self.pad_id)
        labels = pad_sequence([it["labels"] for it in items], batch_first=True, padding_value=-100)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_id).long(), "labels": labels}

    def decode(self, ids: torch.Tensor) -> list[str]:
        # skip_special_tokens drops <pad>/</s>; WordLevel decoding joins with spaces, which is our program form.
        return [" ".join(text.split()) for text in self.tokenizer.decode_batch(ids.tolist(), skip_special_tokens=True)]

    def state_dict(self) -> dict[str, Any]:
        return {"pretrained": self.pretrained, "max_source_length": self.max_source_length,
                "max_target_length": self.max_target_length, "tokenizer": self.tokenizer.to_str(),
                "longest_train_target": self.longest_train_target}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Seq2SeqFeaturizer":
        featurizer = cls(state["pretrained"], state["max_source_length"], state["max_target_length"])
        featurizer.tokenizer = Tokenizer.from_str(state["tokenizer"])
        featurizer.longest_train_target = state["longest_train_target"]
        return featurizer


@register_model("seq2seq")
class Seq2Seq(Parser):
    """T5 trained with teacher forcing (token cross-entropy); parses by greedy or beam decoding."""

    featurizer_class = Seq2SeqFeaturizer

    def __init__(self, featurizer: Seq2SeqFeaturizer, formalism: str, preset: str = "mini",
                 architecture: dict | None = None, dropout: float = 0.1, lr: float = 1e-3,
                 weight_decay: float = 0.0, warmup_steps: int = 500, num_beams: int = 1,
                 max_decode_length: int | None = None):
        super().__init__(featurizer, formalism)
        self.save_hyperparameters(ignore=["featurizer"])
        if featurizer.pretrained:
            self.t5 = T5ForConditionalGeneration.from_pretrained(featurizer.pretrained)
        else:
            if preset not in PRESETS:
                raise ValueError(f"model.preset={preset!r} is not a T5 preset; choose one of {', '.join(PRESETS)}")
            config = T5Config(vocab_size=featurizer.vocab_size, dropout_rate=dropout,
                              pad_token_id=featurizer.pad_id, eos_token_id=featurizer.eos_id,
                              decoder_start_token_id=featurizer.pad_id,
                              **{**PRESETS[preset], **(architecture or {})})
            self.t5 = T5ForConditionalGeneration(config)
        # Generalisation splits (SCAN length) need outputs longer than any training target.
        self.max_decode_length = max_decode_length or 2 * featurizer.longest_train_target + 16

    @property
    def backbone(self) -> str:
        """What the leaderboard calls this network: the pretrained name, else the scratch preset."""
        return self.featurizer.pretrained or f"t5-{self.hparams.preset}-scratch"

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.t5(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    @torch.no_grad()
    def parse(self, batch: dict[str, Any]) -> list[str]:
        generated = self.t5.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                     max_new_tokens=self.max_decode_length, num_beams=self.hparams.num_beams,
                                     do_sample=False, pad_token_id=self.featurizer.pad_id,
                                     eos_token_id=self.featurizer.eos_id,
                                     decoder_start_token_id=self.t5.config.decoder_start_token_id)
        return self.featurizer.decode(generated)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        warmup = max(1, self.hparams.warmup_steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the network and its tokenizer in the Hugging Face layout, loadable with ``pretrained=``."""
        from transformers import PreTrainedTokenizerFast

        self.t5.save_pretrained(directory)
        PreTrainedTokenizerFast(tokenizer_object=self.featurizer.tokenizer, pad_token=PAD, eos_token=EOS,
                                unk_token=UNK).save_pretrained(directory)
