import pytest

from unified.registry import Registry, UnknownNameError


def test_register_and_get():
    reg = Registry("benchmark")

    @reg.register("bfcl_v4")
    class Bfcl:
        pass

    reg.register("claw_eval", object)
    assert reg.get("bfcl_v4") is Bfcl
    assert reg.names() == ["bfcl_v4", "claw_eval"]
    assert "claw_eval" in reg and len(reg) == 2


def test_unknown_name_lists_valid_and_suggests():
    reg = Registry("benchmark")
    for name in ("bfcl_v4", "claw_eval", "qwenclawbench"):
        reg.register(name, object())
    with pytest.raises(UnknownNameError) as info:
        reg.get("bfcl_v3")
    message = str(info.value)
    assert "unknown benchmark 'bfcl_v3'" in message
    assert "Did you mean 'bfcl_v4'" in message
    assert "bfcl_v4, claw_eval, qwenclawbench" in message


def test_duplicate_registration_is_an_error():
    reg = Registry("policy")
    reg.register("hf", int)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("hf", str)
    reg.register("hf", str, replace=True)
    assert reg.get("hf") is str


def test_lazy_entries_import_on_first_use_and_are_listed_before():
    import sys

    reg = Registry("thing")
    reg.register_lazy("json_decoder", "json.decoder:JSONDecoder")
    reg.register_lazy("fresh", "zz_lazy_registry_probe:VALUE")
    assert "fresh" in reg and reg.names() == ["fresh", "json_decoder"] and len(reg) == 2
    assert "zz_lazy_registry_probe" not in sys.modules  # nothing imported by listing
    from json.decoder import JSONDecoder

    assert reg.get("json_decoder") is JSONDecoder
    with pytest.raises(UnknownNameError, match="Did you mean 'fresh'"):
        reg.get("fresh!")
    with pytest.raises(ValueError, match="package.module:attr"):
        reg.register_lazy("bad", "no_colon")
