"""Settings: each field's type, check and flags in one place (config.py), the CLI flags made
from them (flags.py), and errors that name their field."""

import argparse
import dataclasses

import pytest

from resispec_gguf import config
from resispec_gguf.surfaces import flags
from resispec_gguf.config import ConfigError, DraftParams, ModelParams, SamplingParams, ServerParams
from resispec_gguf.errors import UserError

CLASSES = (SamplingParams, DraftParams, ModelParams, ServerParams)


@pytest.mark.parametrize("cls,changes,field,needle", [
    (SamplingParams, dict(temperature=-0.1), "temperature", "in [0, 100]"),
    (SamplingParams, dict(temperature=float("nan")), "temperature", "in [0, 100]"),
    (SamplingParams, dict(top_p=0.0), "top_p", "in (0, 1]"),
    (SamplingParams, dict(min_p=1.0), "min_p", "in [0, 1)"),
    (SamplingParams, dict(top_k=-1), "top_k", ">= 0"),
    (SamplingParams, dict(top_k=2.5), "top_k", "integer"),
    (SamplingParams, dict(max_tokens=True), "max_tokens", "integer"),
    (SamplingParams, dict(seed=-1), "seed", ">= 0"),
    (SamplingParams, dict(stop=("a", "")), "stop", "non-empty"),
    (SamplingParams, dict(temperature="0.5"), "temperature", "a number"),
    (SamplingParams, dict(logit_bias={3: 100.5}), "logit_bias", "in [-100, 100] or -inf"),
    (SamplingParams, dict(logit_bias={3: float("inf")}), "logit_bias", "in [-100, 100] or -inf"),
    (SamplingParams, dict(logit_bias=[(-1, 1.0)]), "logit_bias", ">= 0"),
    (SamplingParams, dict(logit_bias=[(4, 1.0), (4, 2.0)]), "logit_bias", "token 4 twice"),
    (SamplingParams, dict(logit_bias=[(4, True)]), "logit_bias", "(token id, bias)"),
    (SamplingParams, dict(logit_bias=[("4", 1.0)]), "logit_bias", "(token id, bias)"),
    (SamplingParams, dict(logit_bias=5), "logit_bias", "a mapping"),
    (DraftParams, dict(method="fast"), "method", "one of none, chain"),
    (DraftParams, dict(budget=config.MAX_TREE_NODES + 1), "budget", f"in [1, {config.MAX_TREE_NODES}]"),
    (DraftParams, dict(method="rrs", draws=8, draft_support=4), "draws", "draft_support"),
    (DraftParams, dict(lookup="yes"), "lookup", "true or false"),
    (ModelParams, dict(n_ctx=config.MIN_CTX - 1), "n_ctx", f">= {config.MIN_CTX}"),
    (ModelParams, dict(n_batch=16), "n_batch", f">= {config.MIN_CTX}"),
    (ModelParams, dict(n_threads=0), "n_threads", ">= 1"),
    (ModelParams, dict(target=None), "target", "must be set"),
    (ServerParams, dict(port=0), "port", "in [1, 65535]"),
    (ServerParams, dict(api_key=""), "api_key", "empty"),
    (ServerParams, dict(api_key="k\u00e9y"), "api_key", "ASCII"),
    (ServerParams, dict(api_key=" key"), "api_key", "blank"),
    (ServerParams, dict(cors_origins=["https://ok.example", "evil.example"]), "cors_origins", "CORS"),
    (ServerParams, dict(max_queue=-1), "max_queue", ">= 0"),
])
def test_bad_values_name_their_field(cls, changes, field, needle):
    with pytest.raises(ConfigError) as e:
        cls(**changes)
    assert e.value.field == field and needle in str(e.value)
    assert isinstance(e.value, UserError) and isinstance(e.value, ValueError)


def test_values_are_normalised_to_the_field_types():
    sp = SamplingParams(temperature=1, stop="END", seed=7)
    assert sp.temperature == 1.0 and isinstance(sp.temperature, float) and sp.stop == ("END",)
    assert ServerParams(cors_origins=["*"]).cors_origins == ("*",)
    assert DraftParams(lookup=1).lookup is True
    assert SamplingParams().replace(top_k=0).top_k == 0
    with pytest.raises(ConfigError):
        SamplingParams().replace(top_k=-5)


def test_a_logit_bias_is_pairs_sorted_by_token_id():
    sp = SamplingParams(logit_bias={7: -100, 2: float("-inf"), 3: 0.5})
    assert sp.logit_bias == ((2, float("-inf")), (3, 0.5), (7, -100.0))
    assert SamplingParams(logit_bias=[[7, -100], (3, 0.5), (2, float("-inf"))]) == sp
    assert sp.replace(temperature=0.0).logit_bias == sp.logit_bias and hash(sp) == hash(sp.replace())
    assert SamplingParams().logit_bias == () and SamplingParams(logit_bias={}).logit_bias == ()


def test_every_setting_is_described_once():
    for cls in CLASSES:
        for f in dataclasses.fields(cls):
            meta = f.metadata
            assert meta["help"] and "%" not in meta["help"], (cls.__name__, f.name)  # argparse formats help with %
            if f.default is None:
                assert "(default:" in meta["help"], f"{cls.__name__}.{f.name}: say what None means"
    names = [flag for cls in CLASSES for f in config.settings(cls) for flag in f.metadata["flags"]]
    assert len(names) == len(set(names)), "a flag belongs to two settings"


@pytest.mark.parametrize("cls,name,text,value", [
    (SamplingParams, "temperature", "0.25", 0.25),
    (SamplingParams, "seed", "none", None),
    (SamplingParams, "seed", "Random", None),
    (SamplingParams, "seed", "12", 12),
    (SamplingParams, "stop", "\n\n", "\n\n"),
    (DraftParams, "lookup", "on", True),
    (DraftParams, "lookup", "No", False),
    (DraftParams, "method", "specinfer", "specinfer"),
    (ModelParams, "draft", "", ""),
    (ModelParams, "draft", "none", "none"),  # a path may be called that
    (ModelParams, "n_threads", "none", None),
])
def test_parse_field(cls, name, text, value):
    assert config.parse_field(cls, name, text) == value


@pytest.mark.parametrize("cls,name,text,needle", [
    (SamplingParams, "temperature", "hot", "must be a number"),
    (SamplingParams, "top_k", "4.5", "must be an integer"),
    (SamplingParams, "top_k", "-1", ">= 0"),
    (SamplingParams, "max_tokens", "none", "must be an integer"),  # not optional
    (DraftParams, "lookup", "maybe", "on or off"),
    (DraftParams, "policy", "wide", "one of budget, static"),
])
def test_parse_field_refuses(cls, name, text, needle):
    with pytest.raises(ConfigError) as e:
        config.parse_field(cls, name, text)
    assert e.value.field == name and needle in str(e.value)


def test_settings_are_found_by_any_of_their_names():
    classes = (SamplingParams, DraftParams)
    for name, found in [("temp", "temperature"), ("--temperature", "temperature"), ("top-k", "top_k"),
                        ("top_p", "top_p"), ("K", "draws"), ("k", "draws"), ("n", "max_tokens"),
                        ("draft-support", "draft_support"), ("lookup", "lookup")]:
        assert config.find_setting(classes, name)[1] == found, name
    with pytest.raises(ConfigError, match="unknown setting 'ctx'; try one of temp, top-k"):
        config.find_setting(classes, "ctx")


def _parser(cls, **kw):
    p = argparse.ArgumentParser(exit_on_error=False)
    flags.add_settings(p, cls, "t", **kw)
    return p


@pytest.mark.parametrize("cls", CLASSES)
def test_flags_default_to_the_dataclass(cls):
    assert flags.from_args(cls, _parser(cls).parse_args([])) == cls()


def test_flags_parse_into_the_settings():
    args = _parser(SamplingParams).parse_args(["--temp", "0", "-n", "7", "--seed", "3", "--stop", "a", "--stop", "b"])
    assert flags.from_args(SamplingParams, args) == SamplingParams(temperature=0.0, max_tokens=7, seed=3, stop=("a", "b"))
    args = _parser(DraftParams).parse_args(["--method", "rrs", "-K", "3", "--lookup"])
    assert flags.from_args(DraftParams, args) == DraftParams(method="rrs", draws=3, lookup=True)
    args = _parser(ModelParams).parse_args(["--draft", "", "-ngl", "5", "--no-flash-attn"])
    assert flags.from_args(ModelParams, args) == ModelParams(draft="", n_gpu_layers=5, flash_attn=False)
    args = _parser(ServerParams).parse_args(["--cors-origin", "*", "--api-key", "k"])
    assert flags.from_args(ServerParams, args) == ServerParams(cors_origins=("*",), api_key="k")
    p = _parser(SamplingParams, skip=("stop",), defaults={"seed": 0})
    assert flags.from_args(SamplingParams, p.parse_args([])).seed == 0
    assert "(default: 0)" in p.format_help() and "fresh each request" not in p.format_help()
    assert "--stop" not in p.format_help()


def test_a_commands_own_option_is_not_read_as_the_setting_of_the_same_name():
    """bench and analyze take several temperatures (``--temperature 1 0.6``, dest
    ``temperature``); SamplingParams must not see that list as its one temperature."""
    p = _parser(SamplingParams, skip=("temperature",))
    p.add_argument("--temperature", type=float, nargs="+", default=[1.0, 0.6])
    args = p.parse_args(["--temperature", "0.7", "-n", "9"])
    assert flags.from_args(SamplingParams, args) == SamplingParams(max_tokens=9)
    assert flags.offered(p, SamplingParams) == tuple(f.name for f in config.settings(SamplingParams)
                                                     if f.name != "temperature")
    assert flags.from_args(DraftParams, args) == DraftParams()  # offered no flags: defaults


def test_a_bad_flag_value_is_an_argparse_error_naming_the_setting():
    with pytest.raises(argparse.ArgumentError, match="temperature must be in"):
        _parser(SamplingParams).parse_args(["--temp", "101"])
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("-k", type=flags.list_type(DraftParams, "draws"))
    assert p.parse_args(["-k", "1, 4,16"]).k == [1, 4, 16]
    with pytest.raises(argparse.ArgumentError, match="draws must be in"):
        p.parse_args(["-k", "1,0"])


def test_a_host_with_spaces_is_not_called_ipv6():
    for text in ["my host:50052", "a\tb:1"]:
        with pytest.raises(ValueError) as e:
            config.rpc_endpoints(text)
        assert "without spaces" in str(e.value) and "IPv6" not in str(e.value)
    with pytest.raises(ValueError, match="IPv6"):
        config.rpc_endpoints("[::1]:50052")
    with pytest.raises(ConfigError) as e:
        config.WorkerParams(host="my host")
    assert "without spaces" in str(e.value) and "IPv6" not in str(e.value)
    with pytest.raises(ConfigError, match="IPv6"):
        config.WorkerParams(host="::1")
