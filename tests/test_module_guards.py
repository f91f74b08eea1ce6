"""Guards on nn.Module trees (issue 34, per-call overhead): what a compiled forward read from a
module must still hold when the entry is reused.  Each test changes one thing a user can change
between calls (an attribute, a submodule, train / eval, a parameter, requires_grad, an attribute
hasattr() looked for, a dict's keys) and checks that the entry is not reused (a recompile) and
that the result equals eager's, before and after."""
import pytest
import torch
import torch.nn as nn

import cdynamo


def _same(opt, m, *args):
    torch.testing.assert_close(opt(*args), m(*args), rtol=1e-5, atol=1e-6)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.0)
        self.scale = 2.0

    def forward(self, x):
        y = self.drop(self.lin(x)) * self.scale
        if hasattr(self, "extra"):   # False at the first call: a HASATTR guard
            y = y + self.extra
        return y


def _setup():
    torch.manual_seed(0)
    m = Block()
    return m, cdynamo.optimize(m), torch.randn(4, 8)


def _recompiled_once(before):
    return cdynamo.stats()["recompiles"] == before + 1


def test_reuse_without_change_does_not_recompile():
    m, opt, x = _setup()
    for _ in range(3):
        _same(opt, m, x)
    st = cdynamo.stats()
    assert st["recompiles"] == 0 and st["frames_compiled"] == 1, st


def test_module_attribute_change_recompiles():
    m, opt, x = _setup()
    _same(opt, m, x)
    m.scale = 3.0
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_submodule_swap_recompiles():
    m, opt, x = _setup()
    _same(opt, m, x)
    m.lin = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_train_eval_switch_recompiles():
    m, opt, x = _setup()
    m.drop.p = 0.5
    torch.manual_seed(1)
    opt(x)
    m.eval()
    _same(opt, m, x)   # eval: no dropout, deterministic
    assert cdynamo.stats()["recompiles"] == 1


def test_parameter_replaced_with_another_shape_recompiles():
    m, opt, x = _setup()
    _same(opt, m, x)
    m.lin.weight = nn.Parameter(torch.randn(8, 8).t())   # same shape, other strides
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_parameter_replaced_with_same_meta_is_read_anew():
    m, opt, x = _setup()
    _same(opt, m, x)
    m.lin.weight = nn.Parameter(torch.randn(8, 8))
    _same(opt, m, x)   # the entry holds (same metadata) and reads the new values


def test_requires_grad_change_recompiles():
    m, opt, x = _setup()
    with torch.no_grad():
        _same(opt, m, x)
    m.lin.weight.requires_grad_(False)
    m.lin.bias.requires_grad_(False)
    with torch.no_grad():
        _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_hasattr_guard_sees_a_plain_attribute():
    m, opt, x = _setup()
    _same(opt, m, x)
    m.extra = 1.5
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1
    del m.extra
    _same(opt, m, x)   # back to the first entry


def test_hasattr_guard_sees_a_buffer_and_a_parameter():
    for add in (lambda m: m.register_buffer("extra", torch.ones(8)),
                lambda m: m.register_parameter("extra", nn.Parameter(torch.ones(8)))):
        cdynamo.reset()
        m, opt, x = _setup()
        _same(opt, m, x)
        add(m)
        _same(opt, m, x)
        assert cdynamo.stats()["recompiles"] == 1


def test_hasattr_guard_sees_a_submodule():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            y = self.lin(x)
            return self.post(y) if hasattr(self, "post") else y

    m = Outer()
    opt = cdynamo.optimize(m)
    x = torch.randn(4, 8)
    _same(opt, m, x)
    m.post = nn.ReLU()   # lands in _modules, found by nn.Module.__getattr__
    assert "post" not in m.__dict__
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_hasattr_guard_sees_a_class_attribute():
    m, opt, x = _setup()
    _same(opt, m, x)
    Block.extra = 0.5   # a class attribute: hasattr now True
    try:
        _same(opt, m, x)
        assert cdynamo.stats()["recompiles"] == 1
    finally:
        del Block.extra
    _same(opt, m, x)


def test_class_property_removed_after_compile():
    # a property read through a module is inlined: an ID guard on type(m).extra makes
    # deleting or replacing it on the class recompile (found by tguard, stop 45)
    m, opt, x = _setup()
    Block.extra = property(lambda self: 0.25)
    try:
        _same(opt, m, x)
    finally:
        del Block.extra
    _same(opt, m, x)


def test_class_property_replaced_after_compile():
    m, opt, x = _setup()
    Block.extra = property(lambda self: 0.25)
    try:
        _same(opt, m, x)
        Block.extra = property(lambda self: -1.5)
        _same(opt, m, x)
    finally:
        del Block.extra


def test_hasattr_on_a_module_with_its_own_getattr():
    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.on = False

        def __getattr__(self, name):   # an override: asked through Python
            if name == "extra" and self.__dict__.get("on"):
                return 3.0
            return super().__getattr__(name)

        def forward(self, x):
            y = self.lin(x)
            return y + self.extra if hasattr(self, "extra") else y

    m = Lazy()
    opt = cdynamo.optimize(m)
    x = torch.randn(4, 8)
    _same(opt, m, x)
    m.on = True
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_dict_keys_guard_follows_the_keys_and_their_order():
    table = {"a": 1.0, "b": 2.0}

    def f(x, d):
        return sum(x * v for v in d.values()) + len(d)

    opt = cdynamo.optimize(f)
    x = torch.randn(5)
    for d in (table, {"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}, {"a": 1.0},
              {"a": 1.0, "b": 2.0, "c": 3.0}):
        torch.testing.assert_close(opt(x, d), f(x, d))
    assert cdynamo.stats()["recompiles"] == 3


# ---- the snapshot of the containers the guards read through (frame/gfast.c) ----------
# Taken after a check that held (the second call); from the third call, sources under
# unchanged dicts take their values without the walk and ID / small-constant guards hold
# without a check.  Each change below comes after three warm calls, so it meets the
# snapshot, and must still recompile (or be read anew) with eager's result.

class Config:
    """An object whose attributes a forward reads (a plain one, and one with a
    Python __getattribute__ as transformers' PretrainedConfig has)."""
    def __init__(self):
        self.scale = 2.0
        self.use_bias = True


class DefaultsConfig(Config):
    """Class-level defaults under the instance's values (a dataclass's fields): the
    instance's win, read through the snapshot while the class is unchanged."""
    scale = 1.0
    use_bias = False


class MappedConfig(Config):
    attribute_map = {"alias": "scale"}

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Deep(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([Block(), Block()])
        self.k = 3

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        x = x * self.config.scale * self.k
        return x + 1 if self.config.use_bias else x


def _warm(opt, m, x, n=3):
    for _ in range(n):
        _same(opt, m, x)
    return cdynamo.stats()["recompiles"]


def _deep(config_type=Config):
    torch.manual_seed(0)
    m = Deep(config_type())
    return m, cdynamo.optimize(m), torch.randn(4, 8)


_CHANGES = {
    "module attribute": lambda m: setattr(m, "k", 4),
    "nested module attribute": lambda m: setattr(m.layers[1], "scale", 5.0),
    "config attribute": lambda m: setattr(m.config, "scale", 0.5),
    "config bool": lambda m: setattr(m.config, "use_bias", False),
    "config object": lambda m: setattr(m, "config", Config()) or setattr(m.config, "scale", 7.0),
    "submodule": lambda m: setattr(m.layers[0], "drop", nn.Sequential(nn.Dropout(0.0), nn.ReLU())),
    "module list item": lambda m: m.layers.__setitem__(1, nn.Sequential(Block(), nn.ReLU())),
    "parameter shape": lambda m: setattr(m.layers[0].lin, "weight",
                                         nn.Parameter(torch.randn(8, 8).t())),
    "dropout p": lambda m: setattr(m.layers[1].drop, "p", 0.0 + 1e-9),
    "class attribute shadows": lambda m: setattr(Block, "scale", property(lambda self: 0.25)),
}


@pytest.mark.parametrize("config_type", [Config, MappedConfig, DefaultsConfig],
                         ids=["plain", "getattribute", "class defaults"])
@pytest.mark.parametrize("change", list(_CHANGES))
def test_change_after_warm_calls_recompiles(change, config_type):
    m, opt, x = _deep(config_type)
    before = _warm(opt, m, x)
    try:
        _CHANGES[change](m)
        _same(opt, m, x)
        _same(opt, m, x)
    finally:
        if "scale" in Block.__dict__:
            del Block.scale
    assert cdynamo.stats()["recompiles"] == before + 1


def test_parameter_with_same_meta_is_read_anew_after_warm_calls():
    m, opt, x = _deep()
    before = _warm(opt, m, x)
    m.layers[0].lin.weight = nn.Parameter(torch.randn(8, 8))
    _same(opt, m, x)
    m.layers[0].lin.bias.data.add_(1.0)
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == before


def test_requires_grad_change_after_warm_calls_recompiles():
    m, opt, x = _deep()
    with torch.no_grad():
        before = _warm(opt, m, x)
        m.layers[1].lin.weight.requires_grad_(False)
        _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == before + 1


def test_a_dict_that_changes_every_call_keeps_results_right():
    """An attribute stored at every call (a changed dict at every check): the snapshot is
    taken again less and less often, and the guards below the dict are walked."""
    m, opt, x = _deep()
    _warm(opt, m, x)
    for i in range(20):
        m.counter = i            # the module's dict changes; no guard reads it
        m.layers[1].scale = 2.0 if i < 15 else 3.0
        _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == 1


def test_global_changed_after_warm_calls_recompiles():
    g = {"factor": 2.0, "torch": torch}
    f = eval(compile("lambda x: x * factor + torch.ones(1)", "<g>", "eval"), g)
    opt = cdynamo.optimize(f)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(opt(x), f(x))
    before = cdynamo.stats()["recompiles"]
    g["factor"] = 3.0
    torch.testing.assert_close(opt(x), f(x))
    g["factor"] = 3.0 + 0.0   # same value, another float object: the entry holds
    torch.testing.assert_close(opt(x), f(x))
    assert cdynamo.stats()["recompiles"] == before + 1


class PropBlock(Block):
    @property
    def extra(self):
        return 0.25


@pytest.mark.parametrize("change", ["replace", "remove", "base class"])
def test_class_level_change_after_warm_calls(change):
    """type(m).extra (a property, read through m.__class__): the snapshot fixes it by the
    class's version tag, which any change to the class or its bases moves.  (Replacing
    PropBlock.forward after optimize(m) is not seen, with or without the snapshot: the
    optimized module keeps the forward it was made with; open, see tspd's report.)"""
    torch.manual_seed(0)
    m = PropBlock()
    opt, x = cdynamo.optimize(m), torch.randn(4, 8)
    _warm(opt, m, x)
    try:
        if change == "replace":
            PropBlock.extra = property(lambda self: -1.5)
        elif change == "remove":
            del PropBlock.extra
        else:
            Block.extra = 3.0   # under PropBlock's own property: no change, entry holds
        _same(opt, m, x)
        _same(opt, m, x)
    finally:
        if "extra" in Block.__dict__:
            del Block.extra
        if "extra" not in PropBlock.__dict__:
            PropBlock.extra = property(lambda self: 0.25)


def test_argument_value_changes_after_warm_calls():
    """A guard on an argument itself (n == 1000) is checked at every call, and a module
    passed as an argument is compared by identity before its dicts are trusted."""
    def f(x, n, mod):
        return mod(x) * n

    opt = cdynamo.optimize(f)
    torch.manual_seed(0)
    a, b, x = Block(), Block(), torch.randn(4, 8)
    for n, mod in ((1000, a), (1000, a), (1000, a), (int("2000"), a), (int("1000"), b),
                   (int("1000"), b)):
        torch.testing.assert_close(opt(x, n, mod), f(x, n, mod))


# ---- transformers configs: their Python __getattribute__ read through the snapshot ----
# frame/gfast.c recognizes transformers' config __getattribute__ (PreTrainedConfig's
# attribute_map, HeterogeneousConfigMixin's per-layer check) and takes a config's reads in:
# object's read of the mapped name, fixed by the instance dict's, the class's and the
# attribute_map's version tags.  Every change below must still be seen.

def _tiny_config_type():
    transformers = pytest.importorskip("transformers")

    class TinyConfig(transformers.PretrainedConfig):
        model_type = "cdynamo_tiny"
        attribute_map = {"alias": "scale"}
        use_bias = False   # a class default under the instance's value, as dataclass fields

        def __init__(self, scale=2.0, other=3.0, use_bias=True, **kw):
            self.scale, self.other, self.use_bias = scale, other, use_bias
            super().__init__(**kw)
    return TinyConfig


class ConfigReader(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        x = self.lin(x) * self.config.alias
        return x + 1 if self.config.use_bias else x


def _hf_setup():
    tp = _tiny_config_type()
    torch.manual_seed(0)
    m = ConfigReader(tp())
    return tp, m, cdynamo.optimize(m), torch.randn(4, 8)


_HF_CHANGES = {
    "value": lambda tp, m: setattr(m.config, "scale", 0.5),
    "value through the alias": lambda tp, m: setattr(m.config, "alias", 0.25),
    "bool": lambda tp, m: setattr(m.config, "use_bias", False),
    "attribute_map changed in place": lambda tp, m: tp.attribute_map.__setitem__("alias", "other"),
    "attribute_map replaced": lambda tp, m: setattr(tp, "attribute_map", {"alias": "other"}),
    "class property shadows": lambda tp, m: setattr(tp, "use_bias", property(lambda s: False)),
    "class property shadows the mapped name": lambda tp, m: setattr(tp, "scale",
                                                                    property(lambda s: 0.75)),
    "config object": lambda tp, m: setattr(m, "config", tp(scale=-1.0)),
}


def test_transformers_config_class_property_read_anew_after_warm_calls():
    """A property on the class (a data descriptor) wins over the instance's value: the
    snapshot never takes its read in, so a value the property computes from elsewhere is
    read anew at every call."""
    tp, m, opt, x = _hf_setup()
    box = [0.75]
    tp.scale = property(lambda s: box[0])
    before = _warm(opt, m, x)
    box[0] = 0.5
    _same(opt, m, x)
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == before + 1


@pytest.mark.parametrize("change", list(_HF_CHANGES))
def test_transformers_config_change_after_warm_calls_recompiles(change):
    tp, m, opt, x = _hf_setup()
    before = _warm(opt, m, x)
    _HF_CHANGES[change](tp, m)
    _same(opt, m, x)
    _same(opt, m, x)
    assert cdynamo.stats()["recompiles"] == before + 1


def test_transformers_config_reads_skip_its_getattribute_when_warm():
    """Warm calls read the config through the snapshot: its Python __getattribute__ does
    not run (Python 3.13 keeps a fresh instance's dict in its inline values, whose stores
    leave the dict's tag: there the reads are walked, as before)."""
    import sys
    tp, m, opt, x = _hf_setup()
    _warm(opt, m, x)
    calls = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__getattribute__":
            calls.append(frame.f_code.co_qualname)
    sys.setprofile(prof)
    try:
        for _ in range(5):
            opt(x)
    finally:
        sys.setprofile(None)
    _same(opt, m, x)
    if sys.version_info < (3, 13):
        assert calls == []
