"""Start-up without torch._dynamo: about 1.5 CPU-seconds of imports that a toy run never uses.

torch imports `torch._dynamo` lazily, on the first call of a function wrapped in
`torch._disable_dynamo` (torch/_compile.py). Two such calls reach every run: the memory pre-check
initialises its meta-device policy (a meta tensor's `normal_` runs a decorated Python reference),
and every optimizer's constructor (`add_param_group`), `zero_grad`, `state_dict` and
`load_state_dict` are decorated, and `step` (torch/optim/optimizer.py's `_use_grad`) imports it to
place graph breaks. `meta_modules()` builds modules on the meta device with the `torch.nn.init`
functions as no-ops (a meta tensor has no values to draw); `plain_optimizers()` hands the optimizer
methods their undecorated function and `lean_optimizer(cls)` gives a subclass of the same name
whose `step` runs the undecorated step under the same grad mode: what the wrappers run outside a
compiled region anyway, so no number changes. Once torch._dynamo is loaded (torch.compile,
transformers) both leave torch's classes as they are.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator

import torch

#: the torch.nn.init functions the toy models' and nn layers' reset_parameters call
_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
)
#: torch.optim.Optimizer's methods wrapped in torch._disable_dynamo (torch/optim/optimizer.py)
_OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


@contextlib.contextmanager
def meta_modules() -> Iterator[None]:
    """Modules built inside are on the meta device and skip `torch.nn.init` (shapes only)."""
    init = torch.nn.init
    saved = {name: getattr(init, name) for name in _INIT_FUNCTIONS if hasattr(init, name)}
    try:
        for name in saved:
            setattr(init, name, _keep)
        with torch.device("meta"):
            yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


def _keep(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


def plain_optimizers() -> int:
    """Give torch.optim.Optimizer's dynamo-disabled methods their plain function, unless
    torch._dynamo is already imported. -> how many methods it set (0 when it did nothing)."""
    if "torch._dynamo" in sys.modules:
        return 0
    done = 0
    for name in _OPTIMIZER_METHODS:
        wrapper = getattr(torch.optim.Optimizer, name, None)
        fn = getattr(wrapper, "__wrapped__", None)
        if fn is None or getattr(fn, "__dynamo_disable", None) is not None:
            continue
        setattr(fn, "__dynamo_disable", fn)  # the wrapper calls this instead of importing torch._dynamo
        done += 1
    return done


_LEAN: dict[type, type] = {}


def lean_optimizer(cls: type[torch.optim.Optimizer]) -> Callable[..., torch.optim.Optimizer]:
    """`cls` (torch.optim.Adam, AdamW, ...) or, while torch._dynamo is not imported, a subclass of
    the same name whose `step` skips the import: the same updates, the same state_dict."""
    plain_optimizers()
    if "torch._dynamo" in sys.modules:
        return cls
    if cls not in _LEAN:
        raw = inspect.unwrap(cls.step)  # below torch's profiling hook and its _use_grad wrapper

        def step(self, closure=None):
            prev = torch.is_grad_enabled()
            try:
                torch.set_grad_enabled(self.defaults["differentiable"])
                return raw(self, closure)
            finally:
                torch.set_grad_enabled(prev)

        # pickled by reference it is `cls` (same name and module): the state is cls's
        attrs = {"step": step, "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        _LEAN[cls] = type(cls.__name__, (cls,), attrs)
    return _LEAN[cls]
