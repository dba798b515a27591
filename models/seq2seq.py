"""Seq2seq baseline: an encoder-decoder over word-level program tokens, the backbone of the IR pipelines.

The baseline of every paper in the zoo (Herzig et al. 2021 §4 trains T5 on programs and on intermediate
representations; Herzig & Berant 2021 and Gai et al. 2021 compare against seq2seq). Three networks:

* ``bart`` (Lewis et al. 2020), the from-scratch default: built at a preset's sizes with random initialisation.
  It has learned absolute positions; T5's relative position biases only reweight attention, and T5 mini from
  scratch could not learn to count SCAN's runs of repeated actions (README, "seq2seq from scratch").
* ``marian`` (Junczys-Dowmunt et al. 2018): BART's layers with the fixed sinusoidal positions of Vaswani et al.
  2017 instead of learned ones, built at a preset's sizes from scratch; a candidate for SCAN's add-primitive
  splits, where learned positions must generalise the counts of runs they never saw.
* ``t5`` (Raffel et al. 2020): built from a preset with random initialisation, or loaded from a pretrained T5 (a
  local directory or a hub name) together with its tokenizer.
* ``bert2bert_minilm``: an encoder-decoder warm-started from MiniLM (Rothe et al. 2020's BERT2BERT recipe; the
  one pretrained model reachable offline, ``zoo.pretrained``). Encoder and decoder layers start from MiniLM's
  weights, the decoder's cross-attention is new. Utterances use MiniLM's word pieces; programs keep the word-level
  vocabulary of the scratch model, because MiniLM's tokenizer lower-cases (``M0``, ``AIRLINEalias0`` would not
  survive the round trip). Each program token's embedding starts as the mean of MiniLM's embeddings of its
  word pieces, so ``directed_by`` begins near "directed by".

Decoding is greedy with the decoder's key/value cache (``num_beams=1``, ``Seq2Seq.greedy``) or beam search
(``generate``).
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch.nn.utils.rnn import pad_sequence
from transformers import (AutoTokenizer, BartConfig, BartForConditionalGeneration, BertLMHeadModel, BertModel,
                          EncoderDecoderModel, MarianConfig, MarianMTModel, T5Config, T5ForConditionalGeneration)
from transformers.utils import logging as transformers_logging

from zoo.parser import Featurizer, Parser
from zoo.pretrained import minilm_path, resolve
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
    """Utterance and program to token ids.

    From scratch: one word-level vocabulary learned on the training split (``tokenizers`` WordLevel over
    whitespace-split tokens, since these programs are already tokenised) for both sides. With ``pretrained``: the
    pretrained model's own tokenizer for both. With ``source_tokenizer`` (bert2bert): that pretrained tokenizer for
    utterances, with its own special tokens (``[CLS] x [SEP]``), and the word-level vocabulary for programs only.
    """

    def __init__(self, pretrained: str | None = None, source_tokenizer: str | None = None,
                 max_source_length: int = 512, max_target_length: int = 512):
        if pretrained and source_tokenizer:
            raise ValueError("model.featurizer: give pretrained (one tokenizer for both sides) or source_tokenizer "
                             "(a pretrained one for utterances only), not both")
        self.pretrained = pretrained
        self.source_tokenizer = source_tokenizer
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.tokenizer: Tokenizer | None = None  # programs (and utterances, unless source is set)
        self.source: Tokenizer | None = None  # utterances; the same object as tokenizer unless source_tokenizer
        self.longest_train_target = 0

    def fit(self, examples: Sequence[Example], world: Any = None) -> "Seq2SeqFeaturizer":
        if self.pretrained:
            self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained).backend_tokenizer
        else:
            tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
            tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            trainer = trainers.WordLevelTrainer(special_tokens=[PAD, EOS, UNK], min_frequency=1, show_progress=False)
            texts = (text for ex in examples
                     for text in ((ex.program,) if self.source_tokenizer else (ex.utterance, ex.program)))
            tokenizer.train_from_iterator(texts, trainer)
            self.tokenizer = tokenizer
        self.source = (AutoTokenizer.from_pretrained(resolve(self.source_tokenizer)).backend_tokenizer
                       if self.source_tokenizer else self.tokenizer)
        for tokenizer in (self.tokenizer, self.source):  # the same object twice without source_tokenizer: harmless
            tokenizer.no_truncation()
            tokenizer.no_padding()
        self.longest_train_target = max((len(self.ids(ex.program)) for ex in examples), default=0)
        return self

    # Ids of the special tokens, read from the vocabulary so pretrained tokenizers work unchanged.
    @property
    def pad_id(self) -> int:
        return self.tokenizer.token_to_id(PAD)

    @property
    def source_pad_id(self) -> int:
        return self.source.token_to_id("[PAD]") if self.source_tokenizer else self.pad_id

    @property
    def eos_id(self) -> int:
        return self.tokenizer.token_to_id(EOS)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def ids(self, text: str, max_length: int | None = None) -> list[int]:
        """Program-side ids of ``text`` ending in </s>, cut to ``max_length`` at the end (the start is what
        matters)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if max_length is not None:
            ids = ids[: max_length - 1]
        return ids + [self.eos_id]

    def source_ids(self, text: str) -> list[int]:
        if not self.source_tokenizer:
            return self.ids(text, self.max_source_length)
        ids = self.source.encode(text).ids  # [CLS] ... [SEP]
        return ids if len(ids) <= self.max_source_length else ids[: self.max_source_length - 1] + ids[-1:]

    def unencodable(self, utterance: str) -> str | None:
        """An utterance longer than ``max_source_length`` would lose its end (``source_ids`` cuts it)."""
        pieces = (len(self.source.encode(utterance).ids) if self.source_tokenizer  # [CLS] ... [SEP]
                  else len(self.tokenizer.encode(utterance, add_special_tokens=False).ids) + 1)  # ... </s>
        if pieces > self.max_source_length:
            return (f"{pieces} tokens, more than the model's max_source_length of {self.max_source_length}: "
                    "its end would be cut off")
        return None

    def encode(self, example: Example) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.tensor(self.source_ids(example.utterance)),
                "labels": torch.tensor(self.ids(example.program, self.max_target_length))}

    def length(self, example: Example) -> tuple[int, int]:
        # Target first: the decoder's steps dominate the cost, and target padding is what bucketing removes.
        return len(self.ids(example.program, self.max_target_length)), len(self.source_ids(example.utterance))

    def collate(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        pad = self.source_pad_id
        input_ids = pad_sequence([it["input_ids"] for it in items], batch_first=True, padding_value=pad)
        labels = pad_sequence([it["labels"] for it in items], batch_first=True, padding_value=-100)
        return {"input_ids": input_ids, "attention_mask": (input_ids != pad).long(), "labels": labels}

    def decode(self, ids: torch.Tensor) -> list[str]:
        # skip_special_tokens drops <pad>/</s>; WordLevel decoding joins with spaces, which is our program form.
        return [" ".join(text.split()) for text in self.tokenizer.decode_batch(ids.tolist(), skip_special_tokens=True)]

    def state_dict(self) -> dict[str, Any]:
        return {"pretrained": self.pretrained, "source_tokenizer": self.source_tokenizer,
                "max_source_length": self.max_source_length, "max_target_length": self.max_target_length,
                "tokenizer": self.tokenizer.to_str(),
                "source": self.source.to_str() if self.source_tokenizer else None,
                "longest_train_target": self.longest_train_target}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Seq2SeqFeaturizer":
        featurizer = cls(state["pretrained"], state.get("source_tokenizer"), state["max_source_length"],
                         state["max_target_length"])
        featurizer.tokenizer = Tokenizer.from_str(state["tokenizer"])
        featurizer.source = Tokenizer.from_str(state["source"]) if state.get("source") else featurizer.tokenizer
        featurizer.longest_train_target = state["longest_train_target"]
        return featurizer


BACKBONES = ("t5", "bart", "marian", "bert2bert_minilm")
SCHEDULES = ("constant", "linear", "cosine", "inverse_sqrt")


def lr_factor(schedule: str, warmup: int, total: float, step: int) -> float:
    """The learning rate at ``step`` as a share of the peak: a linear warm-up over ``warmup`` steps, then constant,
    a linear or cosine decay to 0 at step ``total`` (the run's last), or 1/sqrt decay (Vaswani et al. 2017)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "inverse_sqrt":
        return math.sqrt(warmup / (step + 1))
    if schedule == "constant" or not math.isfinite(total) or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


@register_model("seq2seq")
class Seq2Seq(Parser):
    """An encoder-decoder trained with teacher forcing (token cross-entropy); parses by greedy or beam decoding."""

    featurizer_class = Seq2SeqFeaturizer

    def __init__(self, featurizer: Seq2SeqFeaturizer, formalism: str, backbone: str = "t5", preset: str = "mini",
                 architecture: dict | None = None, dropout: float = 0.1, lr: float = 1e-3,
                 weight_decay: float = 0.0, warmup_steps: int = 500, schedule: str = "constant",
                 betas: Sequence[float] = (0.9, 0.999), label_smoothing: float = 0.0, num_beams: int = 1,
                 max_decode_length: int | None = None):
        super().__init__(featurizer, formalism)
        self.save_hyperparameters(ignore=["featurizer"])
        if schedule not in SCHEDULES:
            raise ValueError(f"model.params.schedule={schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if backbone not in BACKBONES:
            raise ValueError(f"model.params.backbone={backbone!r}; choose one of {', '.join(BACKBONES)}")
        if backbone == "bert2bert_minilm":
            if not featurizer.source_tokenizer:
                raise ValueError("backbone bert2bert_minilm reads utterances with MiniLM's tokenizer: set "
                                 "model.featurizer.source_tokenizer (configs/model/bert2bert_minilm.yaml does)")
            self.network = _bert2bert(featurizer, dropout)
        elif featurizer.pretrained:
            self.network = T5ForConditionalGeneration.from_pretrained(featurizer.pretrained)
        else:
            if preset not in PRESETS:
                raise ValueError(f"model.preset={preset!r} is not a preset; choose one of {', '.join(PRESETS)}")
            sizes = {**PRESETS[preset], **(architecture or {})}
            self.network = (_bart(featurizer, sizes, dropout, backbone) if backbone in BART_LAYERS else
                            T5ForConditionalGeneration(T5Config(
                                vocab_size=featurizer.vocab_size, dropout_rate=dropout, pad_token_id=featurizer.pad_id,
                                eos_token_id=featurizer.eos_id, decoder_start_token_id=featurizer.pad_id, **sizes)))
        # Generalisation splits (SCAN length) need outputs longer than any training target; learned positions
        # (BERT's, BART's) stop at max_position_embeddings.
        self.max_decode_length = max_decode_length or 2 * featurizer.longest_train_target + 16
        positions = getattr(getattr(self.network.config, "decoder", self.network.config), "max_position_embeddings", 0)
        if positions:
            self.max_decode_length = min(self.max_decode_length, positions - 1)

    @property
    def backbone(self) -> str:
        """What the leaderboard calls this network: the pretrained name, else the scratch preset and the T5Config
        fields that ``architecture`` changes, e.g. ``t5-mini-scratch (relative_attention_num_buckets=128)``."""
        if self.hparams.backbone == "bert2bert_minilm":
            return "bert2bert-minilm"
        if self.featurizer.pretrained:
            return self.featurizer.pretrained
        changed = ", ".join(f"{key}={value}" for key, value in sorted((self.hparams.architecture or {}).items()))
        return f"{self.hparams.backbone}-{self.hparams.preset}-scratch" + (f" ({changed})" if changed else "")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        output = self.network(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              labels=batch["labels"])
        loss = output.loss
        if self.hparams.label_smoothing:
            loss = F.cross_entropy(output.logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100,
                                   label_smoothing=self.hparams.label_smoothing)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    @torch.no_grad()
    def parse(self, batch: dict[str, Any]) -> list[str]:
        if self.hparams.num_beams == 1:
            return self.featurizer.decode(self.greedy(batch["input_ids"], batch["attention_mask"]))
        generated = self.network.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                          max_new_tokens=self.max_decode_length, num_beams=self.hparams.num_beams,
                                          do_sample=False, pad_token_id=self.featurizer.pad_id,
                                          eos_token_id=self.featurizer.eos_id,
                                          decoder_start_token_id=self.network.config.decoder_start_token_id)
        return self.featurizer.decode(generated)

    @torch.no_grad()
    def greedy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Greedy decoding with the decoder's key/value cache, one batched step per output position. Rows that
        have produced </s> leave the batch (and the cache), so a batch costs its longest output only for the rows
        still decoding. Returns [batch, length] token ids, <pad> after each </s>; the same tokens as
        ``generate(num_beams=1)``."""
        pad, eos = self.featurizer.pad_id, self.featurizer.eos_id
        hidden = self.network.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        output = torch.full((len(input_ids), self.max_decode_length), pad, dtype=torch.long, device=input_ids.device)
        rows = torch.arange(len(input_ids), device=input_ids.device)  # the output rows still decoding
        tokens = torch.full((len(input_ids), 1), self.network.config.decoder_start_token_id, device=input_ids.device)
        cache = None
        for position in range(self.max_decode_length):
            step = self.network(encoder_outputs=(hidden,), attention_mask=attention_mask, decoder_input_ids=tokens,
                                past_key_values=cache, use_cache=True)
            chosen = step.logits[:, -1].argmax(-1)
            output[rows, position] = chosen
            going = chosen != eos
            if not going.any():
                break
            cache = step.past_key_values
            if not going.all():
                keep = going.nonzero().squeeze(1)
                rows, hidden, attention_mask, chosen = rows[keep], hidden[keep], attention_mask[keep], chosen[keep]
                cache.reorder_cache(keep)
            tokens = chosen[:, None]
        return output

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                      weight_decay=self.hparams.weight_decay)
        total = self.trainer.estimated_stepping_batches if self._trainer is not None else 0
        factor = partial(lr_factor, self.hparams.schedule, max(1, self.hparams.warmup_steps), total)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the network and its tokenizer in the Hugging Face layout, loadable with ``pretrained=``."""
        from transformers import PreTrainedTokenizerFast

        if self.hparams.backbone != "t5":
            raise ValueError(f"save_pretrained writes T5 models; this one is {self.hparams.backbone}")
        self.network.save_pretrained(directory)
        PreTrainedTokenizerFast(tokenizer_object=self.featurizer.tokenizer, pad_token=PAD, eos_token=EOS,
                                unk_token=UNK).save_pretrained(directory)


# Backbones built from BART's layers: (config class, model class, config settings of their own). MarianMT's
# sinusoids have amplitude 1 where embeddings start at std 0.02: scaled by sqrt(d_model), as Vaswani et al. and
# MarianMT scale them, the words are not drowned by their positions.
BART_LAYERS = {"bart": (BartConfig, BartForConditionalGeneration, {}),
               "marian": (MarianConfig, MarianMTModel, {"scale_embedding": True})}


def _bart(featurizer: Seq2SeqFeaturizer, sizes: dict[str, int], dropout: float,
          backbone: str = "bart") -> BartForConditionalGeneration | MarianMTModel:
    """BART (Lewis et al. 2020) from scratch at a T5 preset's sizes: the same widths, depths and heads, with learned
    absolute positions where T5 has relative attention biases only (README: why the scratch recipe uses it).
    ``backbone="marian"``: the same layers with fixed sinusoidal positions (MarianMT's)."""
    unknown = set(sizes) - {"d_model", "d_ff", "num_layers", "num_decoder_layers", "num_heads", "d_kv"}
    if unknown:
        raise ValueError(f"model.params.architecture: {', '.join(sorted(unknown))} are T5Config fields with no BART "
                         "counterpart here")
    if sizes["d_kv"] * sizes["num_heads"] != sizes["d_model"]:
        raise ValueError(f"backbone {backbone} needs d_kv x num_heads = d_model")
    config_class, model_class, own_settings = BART_LAYERS[backbone]
    config = config_class(vocab_size=featurizer.vocab_size, d_model=sizes["d_model"],
                          encoder_layers=sizes["num_layers"], decoder_layers=sizes["num_decoder_layers"],
                          encoder_attention_heads=sizes["num_heads"], decoder_attention_heads=sizes["num_heads"],
                          encoder_ffn_dim=sizes["d_ff"], decoder_ffn_dim=sizes["d_ff"], dropout=dropout,
                          activation_function="gelu",  # BART's; MarianConfig's default is swish
                          max_position_embeddings=max(featurizer.max_source_length, featurizer.max_target_length,
                                                      2 * featurizer.longest_train_target + 16) + 1,
                          pad_token_id=featurizer.pad_id, eos_token_id=featurizer.eos_id,
                          bos_token_id=featurizer.eos_id, decoder_start_token_id=featurizer.eos_id,
                          forced_eos_token_id=None, **own_settings)
    return model_class(config)


def _bert2bert(featurizer: Seq2SeqFeaturizer, dropout: float) -> EncoderDecoderModel:
    """MiniLM encoder + MiniLM decoder with new cross-attention and a program vocabulary whose embeddings start
    as the mean MiniLM embedding of each token's word pieces (see the module docstring)."""
    path = minilm_path()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the load report lists the new cross-attention: expected
    try:
        encoder = BertModel.from_pretrained(path, hidden_dropout_prob=dropout, add_pooling_layer=False)
        decoder = BertLMHeadModel.from_pretrained(path, is_decoder=True, add_cross_attention=True,
                                                  hidden_dropout_prob=dropout)
    finally:
        transformers_logging.set_verbosity(verbosity)
    pieces = featurizer.source  # MiniLM's tokenizer
    pretrained_embeddings = decoder.get_input_embeddings().weight.detach().clone()
    decoder.resize_token_embeddings(featurizer.vocab_size)
    with torch.no_grad():
        embeddings = decoder.get_input_embeddings().weight
        for token, index in featurizer.tokenizer.get_vocab().items():
            ids = pieces.encode(token.replace("_", " "), add_special_tokens=False).ids
            if ids and token not in (PAD, EOS, UNK):
                embeddings[index] = pretrained_embeddings[ids].mean(0)
    model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    # BART's convention, not T5's <pad>: EncoderDecoderModel masks <pad> out of the decoder's attention in training,
    # so a <pad> start token would be invisible there and visible in generation
    model.config.decoder_start_token_id = featurizer.eos_id
    model.config.pad_token_id = featurizer.pad_id
    model.config.eos_token_id = featurizer.eos_id
    model.config.vocab_size = featurizer.vocab_size
    return model
