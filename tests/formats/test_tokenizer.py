# SPDX-License-Identifier: MIT
"""int4awq.formats.tokenizer on layer_files' synthetic checkpoints: the GGUF header's tokenizer, rebuilt from
the tokenizers library's parts, gives the ids the tokenizer.json of the same vocabulary gives; text comes back
whole, streamed or not; BOS, EOS and the chat template as the files say; each refusal one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [TESTS]

pytest.importorskip("tokenizers")

import layer_files as lf  # noqa: E402

from int4awq.errors import ConfigError  # noqa: E402
from int4awq.formats.tokenizer import load_tokenizer  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! It's 2026, isn't it?",
    "café crème brûlée, naïve résumé; Ærøskøbing, Straße, Ελληνικά, 日本語",
    "llama 🦙 and a family 👨‍👩‍👧 emoji",
    "digits 1234567890 and 3.14159 and -42",
    "runs   of    spaces\tand tabs\t\tthen\n\nnew lines\r\n  indented\n",
    "   leading and trailing   ",
    "",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(AutoAWQ directory with tokenizer.json, Q4_K_M GGUF with the same vocabulary) at small shapes."""
    d = tmp_path_factory.mktemp("tok")
    awq = lf.awq_checkpoint(d / "awq", e=128, h=256, head="tied", tokenizer=True)
    gguf = lf.q4_k_m_file(d / "m.gguf", e=256, h=256, head="output", tokenizer=True)
    return awq, gguf


@pytest.fixture(scope="module")
def toks(files):
    return load_tokenizer(files[0]), load_tokenizer(files[1])


def _gguf(path, **kw):
    """A GGUF file with only the tiny tokenizer in its header (layer_files.gguf_tokenizer's options)."""
    import gguf

    out = gguf.GGUFWriter(str(path), "llama")
    lf.gguf_tokenizer(out, **kw)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return path


def _one_line(e, *names):
    msg = str(e.value)
    assert "\n" not in msg
    for n in names:
        assert str(n) in msg, msg
    return msg


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_and_round_trip(toks, text):
    hf, gg = toks
    ids = hf.encode(text, add_bos=False)
    assert gg.encode(text, add_bos=False) == ids
    assert hf.backend.encode(text, add_special_tokens=False).ids == ids
    assert hf.decode(ids) == text and gg.decode(ids) == text


def test_vocabulary_and_special_ids(toks):
    hf, gg = toks
    v = hf.backend.get_vocab(with_added_tokens=True)
    assert hf.vocab_size == gg.vocab_size == len(v) <= lf.VOCAB
    assert hf.bos_id == gg.bos_id == v["<|begin_of_text|>"]
    assert hf.eos_ids == gg.eos_ids == {v["<|end_of_text|>"], v["<|eot_id|>"]}
    assert hf.bos_token == gg.bos_token == "<|begin_of_text|>"
    assert hf.eos_token == gg.eos_token == "<|eot_id|>"
    # special tokens written in a text are recognised, and dropped by decode unless kept
    ids = gg.encode("a<|eot_id|>b", add_bos=False)
    assert v["<|eot_id|>"] in ids and ids == hf.encode("a<|eot_id|>b", add_bos=False)
    assert gg.decode(ids) == "ab"
    assert gg.decode(ids, skip_special=False) == "a<|eot_id|>b"


def test_bos(files, toks, tmp_path):
    hf, gg = toks
    for (
        t
    ) in toks:  # tokenizer.json's post-processor and GGUF's add_bos_token both add it
        assert t.add_bos
        assert t.encode("Hi") == [t.bos_id, *t.encode("Hi", add_bos=False)]
        assert t.encode("Hi", add_bos=True) == t.encode("Hi")
    # GGUF without tokenizer.ggml.add_bos_token: llama.cpp's default of the pre-tokenizer
    assert load_tokenizer(_gguf(tmp_path / "a.gguf", add_bos=None)).add_bos
    no = load_tokenizer(_gguf(tmp_path / "b.gguf", pre="gpt-2", add_bos=None))
    assert not no.add_bos and no.encode("Hi")[0] != no.bos_id
    assert not load_tokenizer(_gguf(tmp_path / "c.gguf", add_bos=False)).add_bos
    # tokenizer_config.json's add_bos_token overrides the post-processor
    d = tmp_path / "hf"
    d.mkdir()
    lf.tokenizer_files(d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps(cfg | {"add_bos_token": False}))
    t = load_tokenizer(d)
    assert not t.add_bos and t.encode("Hi") == hf.encode("Hi", add_bos=False)
    # a tokenizer.json named directly
    assert load_tokenizer(files[0] / "tokenizer.json").encode("Hi") == hf.encode("Hi")


@pytest.mark.parametrize("which", [0, 1])
def test_stream_joins_to_decode(toks, which):
    tok = toks[which]
    text = "Llamas 🦙 eat café grass 👨‍👩‍👧!\n"
    ids = tok.encode(text, add_bos=True) + [min(tok.eos_ids)]
    emoji = [i for i in ids if tok.decode([i]) == "\ufffd"]
    assert (
        len(emoji) >= 4
    )  # the emoji's bytes are tokens of their own: split across tokens
    s = tok.stream()
    pieces = [s.push(i) for i in ids]
    pieces.append(s.finish())
    assert "".join(pieces) == tok.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)
    assert "🦙" in pieces  # emitted whole, once its last byte arrived


def test_stream_incomplete_end(toks):
    tok = toks[1]
    ids = tok.encode("a🦙", add_bos=False)[:-1]  # the emoji cut short
    s = tok.stream()
    assert "".join(s.push(i) for i in ids) == "a"
    assert s.finish() == "\ufffd"


def test_chat(toks):
    hf, gg = toks
    ids = gg.chat("  Hi there ")
    assert ids == hf.chat("  Hi there ")
    assert ids.count(gg.bos_id) == 1 and ids[0] == gg.bos_id
    assert gg.decode(ids, skip_special=False) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_chat_template_jinja_file(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    lf.tokenizer_files(d)
    (d / "chat_template.jinja").write_text(
        "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"
    )
    t = load_tokenizer(d)
    assert t.decode(t.chat("x"), skip_special=False) == "<|begin_of_text|>x<|eot_id|>"


def test_refusals(files, tmp_path):
    awq, gguf = files
    bare = lf.awq_checkpoint(tmp_path / "bare", e=128, h=256)
    with pytest.raises(ConfigError) as e:
        load_tokenizer(bare)
    _one_line(e, bare, "tokenizer.json")
    plain = lf.q4_k_m_file(tmp_path / "plain.gguf", e=256, h=256)
    with pytest.raises(ConfigError) as e:
        load_tokenizer(plain)
    _one_line(e, plain, "tokenizer.ggml.tokens")
    for model in ("llama", "bert"):
        path = _gguf(tmp_path / f"{model}.gguf", model=model)
        with pytest.raises(ConfigError) as e:
            load_tokenizer(path)
        _one_line(e, path, repr(model), "gpt2")
    for pre in ("deepseek-llm", None):
        path = _gguf(tmp_path / f"pre-{pre}.gguf", pre=pre)
        with pytest.raises(ConfigError) as e:
            load_tokenizer(path)
        _one_line(e, path, "tokenizer.ggml.pre", repr(pre))
    with pytest.raises(ConfigError) as e:
        load_tokenizer(tmp_path / "nothing.gguf")
    _one_line(e, "nothing.gguf")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError) as e:
        load_tokenizer(tmp_path / "bad.json")
    _one_line(e, "bad.json")


def test_chat_refusals(tmp_path, monkeypatch):
    t = load_tokenizer(_gguf(tmp_path / "nt.gguf", chat_template=None))
    assert t.encode("Hi")  # a file without a template still tokenizes
    with pytest.raises(ConfigError) as e:
        t.chat("Hi")
    _one_line(e, "--chat", "nt.gguf", "no chat template")
    d = tmp_path / "hf"
    d.mkdir()
    lf.tokenizer_files(d)
    (d / "tokenizer_config.json").unlink()
    with pytest.raises(ConfigError) as e:
        load_tokenizer(d).chat("Hi")
    _one_line(e, "--chat", "no chat template")
    t = load_tokenizer(_gguf(tmp_path / "t.gguf"))
    bad = dataclasses.replace(t, chat_template="{{ raise_exception('no') }}")
    with pytest.raises(ConfigError) as e:
        bad.chat("Hi")
    _one_line(e, "--chat", "fails (no)")
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ConfigError) as e:
        t.chat("Hi")
    _one_line(e, "--chat", "jinja2")
