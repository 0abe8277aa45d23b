# SPDX-License-Identifier: MIT
"""The tokenizer a model file carries, for `generate` (issue 53): text to token ids and back, with the file's
BOS and end-of-generation tokens and its chat template. Everything tokenizing is Hugging Face's `tokenizers`
library; nothing here is a hand-written BPE.

* A checkpoint directory (AutoAWQ, Hugging Face): its tokenizer.json as the library reads it;
  tokenizer_config.json's bos_token, eos_token, add_bos_token and chat_template (or chat_template.jinja, which
  transformers prefers), and generation_config.json's / config.json's bos_token_id and eos_token_id.
* A GGUF file: the tokenizer in its header (llama.cpp's tokenizer.ggml.* keys), rebuilt from the library's own
  parts. Only tokenizer.ggml.model "gpt2" is read: byte-level BPE, Llama 3's. Its token strings and merges are
  already in the byte-to-character mapping of GPT-2, so they go to models.BPE as they are; the text is split by
  the regex that tokenizer.ggml.pre names (PRE_TOKENIZERS), then bytes mapped by ByteLevel, and decoded by
  ByteLevel; CONTROL tokens (type 3) are special added tokens, USER_DEFINED ones (type 4) plain added tokens,
  as transformers' GGUF converter and llama.cpp treat them. "llama" (SentencePiece, Llama 1 and 2) is
  refused: its files give scores, not merges, and `tokenizers` has no score-ranked BPE; transformers rebuilds
  merges from the scores, an approximation this module does not make.

Bad input (no tokenizer in the file, a model or pre-tokenizer not read, --chat without a template) raises
ConfigError with one line naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .gguf_file import is_gguf

# Llama 3's split, as its tokenizer.json holds it (meta-llama/Llama-3.2-1B, pre_tokenizer.pretokenizers[0];
# llama.cpp's llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_LLAMA3, keeps it as its "original regex from
# tokenizer.json" and runs an equivalent without the (?i:) group).
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# GPT-2's split (openai/gpt-2 src/encoder.py; llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2).
GPT2_REGEX = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)
# Qwen 2's: Llama 3's with one digit a piece (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2).
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

# tokenizer.ggml.pre -> (regex, ignore_merges, add BOS when the file has no tokenizer.ggml.add_bos_token),
# as llama.cpp's llama_vocab::load maps the names: its Llama 3 group looks a whole piece up in the vocabulary
# before merging (ignore_merges, which Llama 3's tokenizer.json sets too) and adds BOS.
PRE_TOKENIZERS = {
    **{
        name: (LLAMA3_REGEX, True, True)
        for name in (
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
        )
    },
    "dbrx": (LLAMA3_REGEX, False, False),
    "smaug-bpe": (LLAMA3_REGEX, False, False),
    "gpt-2": (GPT2_REGEX, False, False),
    "qwen2": (QWEN2_REGEX, False, False),
}

# End-of-turn tokens taken as ends of generation when the vocabulary has them as special tokens, whatever
# eos the file names (llama.cpp adds tokens of these texts to its end-of-generation set; a Llama 3 base
# model's eos is <|end_of_text|>, its instruct model ends a turn with <|eot_id|>).
END_OF_TURN = ("<|end_of_text|>", "<|eot_id|>", "<|eom_id|>")

# GGUF token types (gguf.TokenType)
_CONTROL, _USER_DEFINED = 3, 4


def _library():
    try:
        import tokenizers
    except ModuleNotFoundError:
        raise ConfigError(
            "reading a tokenizer needs the tokenizers package: pip install tokenizers (make deps)"
        ) from None
    return tokenizers


@dataclass
class Tokenizer:
    """A model file's tokenizer: `backend` is a tokenizers.Tokenizer; the rest is what the file says around
    it. encode adds no token but BOS (the file's rule, or as asked); decode drops special tokens.
    """

    backend: object
    source: str  # the file it came from, for messages
    kind: str  # e.g. "tokenizer.json", "GGUF gpt2 (llama-bpe)"
    bos_id: int | None
    eos_ids: frozenset[int]
    add_bos: bool  # the file's rule for a prompt
    chat_template: str | None = None
    bos_token: str = ""
    eos_token: str = ""

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of text (special tokens written in it are recognised); BOS first when add_bos, or when
        the file says so if add_bos is None."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.backend.decode(
            [int(i) for i in ids], skip_special_tokens=skip_special
        )

    def stream(self) -> "StreamDecoder":
        """An incremental decoder: push each new id, print what it returns."""
        return StreamDecoder(self)

    def chat(self, prompt: str) -> list[int]:
        """The prompt as one user message through the file's chat template (rendered as transformers'
        apply_chat_template renders it: add_generation_prompt, bos_token and eos_token given), tokenized; BOS
        added only where the file adds one and the template did not write it."""
        text = render_chat(self, [{"role": "user", "content": prompt}])
        ids = self.encode(text, add_bos=False)
        if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids = [self.bos_id, *ids]
        return ids

    def describe(self) -> str:
        """One line: what was read, its size, BOS and EOS, whether it has a chat template."""
        eos = ", ".join(str(i) for i in sorted(self.eos_ids)) or "none"
        return (
            f"tokenizer: {self.kind}, {self.vocab_size} tokens, BOS {self.bos_id} "
            f"({'added' if self.add_bos else 'not added'}), EOS {eos}, "
            f"chat template {'yes' if self.chat_template else 'no'} ({self.source})"
        )


@dataclass
class StreamDecoder:
    """Text as tokens arrive: the ids are kept, and each push returns what decode(all ids) has gained, held
    back while it ends in an incomplete UTF-8 character (U+FFFD), so no character is split; joined, the
    pieces and finish() are decode(all ids)."""

    tokenizer: Tokenizer
    ids: list[int] = field(default_factory=list)
    emitted: str = ""

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd") or not text.startswith(self.emitted):
            return ""
        new, self.emitted = text[len(self.emitted) :], text
        return new

    def finish(self) -> str:
        """What is left (an incomplete character at the end comes out as U+FFFD)."""
        text = self.tokenizer.decode(self.ids)
        new = text[len(self.emitted) :] if text.startswith(self.emitted) else ""
        self.emitted = text
        return new


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of a GGUF file or of a checkpoint directory (or a tokenizer.json itself)."""
    p = Path(path)
    if p.is_dir():
        return _from_directory(p)
    if is_gguf(p):
        return _from_gguf(p)
    if p.is_file() and p.name.endswith(".json"):
        return _from_directory(p.parent, p)
    if not p.exists():
        raise ConfigError(f"{path}: no such file or directory")
    raise ConfigError(
        f"{path}: not a GGUF file, a checkpoint directory or a tokenizer.json"
    )


# ------------------------------------------------------------------ checkpoint directories


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not readable JSON ({e})") from None
    return out if isinstance(out, dict) else {}


def _token_text(v) -> str | None:
    """tokenizer_config's bos_token / eos_token: a string, or an AddedToken dict with "content"."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids(v) -> list[int]:
    """An eos_token_id / bos_token_id: an int, a list of them, or absent."""
    if isinstance(v, bool):
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, list):
        return [x for x in v if isinstance(x, int) and not isinstance(x, bool)]
    return []


def _from_directory(d: Path, file: Path | None = None) -> Tokenizer:
    tokenizers = _library()
    file = file or d / "tokenizer.json"
    if not file.is_file():
        raise ConfigError(f"{d}: no tokenizer (no {file.name} in the directory)")
    try:
        backend = tokenizers.Tokenizer.from_file(str(file))
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{file}: not a readable tokenizer.json ({first})") from None
    cfg = _json(d / "tokenizer_config.json")
    gen, model = _json(d / "generation_config.json"), _json(d / "config.json")

    def token_id(text):
        return backend.token_to_id(text) if text else None

    bos_text = _token_text(cfg.get("bos_token"))
    bos_id = token_id(bos_text)
    if bos_id is None:
        bos_id = next(
            iter(_ids(gen.get("bos_token_id")) + _ids(model.get("bos_token_id"))), None
        )
    eos_text = _token_text(cfg.get("eos_token"))
    eos = [token_id(eos_text)] + _ids(gen.get("eos_token_id"))
    eos += _ids(model.get("eos_token_id"))
    add_bos = cfg.get("add_bos_token")
    if not isinstance(add_bos, bool):
        # the tokenizer.json's post-processor: does it put BOS before a text?
        add_bos = bos_id is not None and backend.encode(
            "", add_special_tokens=True
        ).ids[:1] == [bos_id]
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {
            t.get("name"): t.get("template") for t in template if isinstance(t, dict)
        }
        template = named.get("default")
    if (d / "chat_template.jinja").is_file():
        template = (d / "chat_template.jinja").read_text(encoding="utf-8")
    return _finish(
        backend,
        str(file),
        "tokenizer.json",
        bos_id,
        eos,
        add_bos,
        template if isinstance(template, str) and template else None,
        bos_text,
        eos_text,
    )


def _finish(backend, source, kind, bos_id, eos, add_bos, template, bos_text, eos_text):
    """The Tokenizer, with the end-of-turn tokens added to eos (a list, the file's own first: its text is the
    template's eos_token) and token texts for the template."""
    special = {
        t.content
        for t in backend.get_added_tokens_decoder().values()
        if getattr(t, "special", False)
    }
    eos = [i for i in eos if i is not None]
    eos += [backend.token_to_id(t) for t in END_OF_TURN if t in special]
    size = backend.get_vocab_size(with_added_tokens=True)
    for what, i in [("BOS", bos_id), *(("EOS", i) for i in eos)]:
        if i is not None and not 0 <= i < size:
            raise ConfigError(f"{source}: {what} id {i} is outside the {size} tokens")
    if bos_id is not None and not bos_text:
        bos_text = backend.id_to_token(bos_id)
    if eos and not eos_text:
        eos_text = backend.id_to_token(eos[0])
    return Tokenizer(
        backend,
        source,
        kind,
        bos_id,
        frozenset(eos),
        bool(add_bos) and bos_id is not None,
        template,
        bos_text or "",
        eos_text or "",
    )


# ------------------------------------------------------------------ GGUF


def _from_gguf(path: Path) -> Tokenizer:
    from .gguf_file import _reader

    tokenizers = _library()
    fields = _reader(path).fields

    def get(key, default=None):
        f = fields.get(key)
        return f.contents() if f is not None else default

    if "tokenizer.ggml.tokens" not in fields:
        raise ConfigError(
            f"{path}: no tokenizer (the GGUF header has no tokenizer.ggml.tokens)"
        )
    model = get("tokenizer.ggml.model")
    if model != "gpt2":
        what = {
            "llama": " (SentencePiece, Llama 1 and 2: the file gives scores, not merges)"
        }.get(model, "")
        raise ConfigError(
            f"{path}: tokenizer.ggml.model {model!r}{what}: only byte-level BPE ('gpt2', Llama 3's) is read"
        )
    pre = get("tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        raise ConfigError(
            f"{path}: tokenizer.ggml.pre {pre!r}: its split is not known here "
            f"(known: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    regex, ignore_merges, default_bos = PRE_TOKENIZERS[pre]
    try:
        tokens = get("tokenizer.ggml.tokens")
        raw_merges = get("tokenizer.ggml.merges", [])
    except UnicodeDecodeError:
        raise ConfigError(
            f"{path}: a token or merge of its tokenizer is not UTF-8 (byte-level BPE's never are)"
        ) from None
    merges = []
    for m in raw_merges:
        pair = tuple(m.split(" "))
        if len(pair) != 2:
            raise ConfigError(
                f"{path}: tokenizer.ggml.merges holds {m!r}: not two tokens"
            )
        merges.append(pair)
    types = get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise ConfigError(
            f"{path}: {len(types)} token types for {len(tokens)} tokens (tokenizer.ggml.token_type)"
        )
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ConfigError(f"{path}: tokenizer.ggml.tokens holds a token twice")
    m = tokenizers
    try:
        backend = m.Tokenizer(m.models.BPE(vocab, merges, ignore_merges=ignore_merges))
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(
            f"{path}: its BPE vocabulary and merges do not load ({first})"
        ) from None
    backend.pre_tokenizer = m.pre_tokenizers.Sequence(
        [
            m.pre_tokenizers.Split(m.Regex(regex), "isolated"),
            m.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = m.decoders.ByteLevel()
    added = [
        m.AddedToken(t, special=k == _CONTROL, normalized=False)
        for t, k in zip(tokens, types)
        if k in (_CONTROL, _USER_DEFINED)
    ]
    backend.add_special_tokens([a for a in added if a.special])
    backend.add_tokens([a for a in added if not a.special])
    bos_id = get("tokenizer.ggml.bos_token_id")
    eos = [
        get(f"tokenizer.ggml.{k}_token_id")
        for k in ("eos", "eot", "eom")  # llama.cpp's end of text, of turn, of message
    ]
    add_bos = get("tokenizer.ggml.add_bos_token", default_bos)
    template = get("tokenizer.chat_template")
    return _finish(
        backend,
        str(path),
        f"GGUF gpt2 ({pre})",
        bos_id,
        eos,
        add_bos,
        template or None,
        None,
        None,
    )


# ------------------------------------------------------------------ chat templates


def render_chat(tok: Tokenizer, messages: list[dict]) -> str:
    """The messages through the file's chat template in a sandboxed jinja2, set up as transformers sets up
    its own (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now, a tojson that keeps
    non-ASCII text; tools and documents None), with add_generation_prompt."""
    if not tok.chat_template:
        raise ConfigError(
            f"--chat: {tok.source} has no chat template (tokenizer.chat_template / chat_template)"
        )
    try:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ModuleNotFoundError:
        raise ConfigError(
            "--chat needs the jinja2 package: pip install jinja2 (make deps)"
        ) from None
    from datetime import datetime

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(tok.chat_template).render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=True,
            bos_token=tok.bos_token,
            eos_token=tok.eos_token,
        )
    except Exception as e:  # the template is the file's: its failure is bad input
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(
            f"--chat: {tok.source}: its chat template fails ({first})"
        ) from None
