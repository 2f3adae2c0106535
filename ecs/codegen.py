"""Building Warp kernels from generated source.

Warp reads a kernel's source through ``inspect``, so generated source is registered in
``linecache`` under a stable pseudo-filename. Module hashes are content-based: the generated
text is deterministic (sorted names, no ids), so kernels cache across processes.
"""

from __future__ import annotations

import hashlib
import linecache
from typing import Any

import warp as wp

_CACHE: dict[tuple[str, ...], wp.Kernel] = {}


def module_for(name: str) -> Any:
    """A Warp module with backward code generation disabled (3x faster compiles)."""
    module = wp.get_module(name)
    module.options["enable_backward"] = False
    return module


def generated_module(kind: str, env_name: str, device_is_cpu: bool) -> str:
    """The module of an env's generated kernels of one ``kind`` ("gen", "fused") for one kind of device.

    A CPU build and a CUDA build generate different kernels (the CPU's action check, loops over rows and
    world claims), and a Warp module's hash covers every kernel in it: kept apart, the CUDA module of a
    process that also built for the CPU (a test run, ``tests.cuda_codegen`` making a kernel cache to carry to
    a GPU machine) is the one a CUDA-only process builds, so a carried cache is found there."""
    return f"ecs_{kind}_{env_name}_{'cpu' if device_is_cpu else 'cuda'}"


def build_kernel(name: str, source: str, namespace: dict[str, Any], module: str) -> wp.Kernel:
    """Compiles ``source`` (one ``def name(...)``) into a Warp kernel of ``module``.

    The same module, source and referenced objects return the same kernel object, so several
    simulations of one environment share compiled code; the referenced functions' qualified
    names enter the kernel key, so two systems of the same name in different modules never
    collide.
    """
    refs = sorted(
        f"{k}={getattr(getattr(v, 'func', v), '__module__', '')}.{getattr(v, 'key', getattr(v, '__name__', ''))}"
        for k, v in namespace.items()
    )
    digest = hashlib.sha1((source + "\n".join(refs)).encode()).hexdigest()[:12]
    key = (module, source, *refs)
    kernel = _CACHE.get(key)
    if kernel is not None:
        return kernel
    filename = f"<ecs-generated:{module}:{name}:{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"wp": wp, **namespace}
    exec(compile(source, filename, "exec"), ns)
    kernel = wp.Kernel(func=ns[name], key=f"{name}_{digest}", module=module_for(module))
    _CACHE[key] = kernel
    return kernel


_NATIVE: dict[tuple[str, ...], Any] = {}


def build_native(name: str, params: str, snippet: str, namespace: dict[str, Any], returns: str = "None") -> Any:
    """A ``wp.func_native`` function ``name(params) -> returns`` whose C++ body is ``snippet``.

    Like ``build_kernel``, from generated source registered in ``linecache``; ``namespace`` holds
    the types the signature names. The same name, signature and snippet return the same function.
    """
    refs = sorted(f"{k}={getattr(v, '__name__', v)}" for k, v in namespace.items())
    key = (name, params, returns, snippet, *refs)
    fn = _NATIVE.get(key)
    if fn is not None:
        return fn
    source = f"@wp.func_native({snippet!r})\ndef {name}({params}) -> {returns}: ...\n"
    digest = hashlib.sha1((source + "\n".join(refs)).encode()).hexdigest()[:12]
    filename = f"<ecs-generated:native:{name}:{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"wp": wp, "__name__": "ecs_native", **namespace}
    exec(compile(source, filename, "exec"), ns)
    fn = _NATIVE[key] = ns[name]
    return fn


def contiguous_access(dtype: Any) -> tuple[Any, Any]:
    """Warp functions ``load(arr, i)`` and ``store(arr, i, value)`` for contiguous 1-d arrays of ``dtype``.

    ``arr[i]`` in a kernel wraps a negative index and multiplies by the array's stride, and the
    CPU compiler keeps both in a loop over worlds (a fused cartpole step reads and writes a dozen
    singletons); these read and write ``arr.data[i]``. Only for arrays the engine allocated
    (contiguous) and indices in range.
    """
    ns: dict[str, Any] = {}
    t = type_expr(dtype, ns)
    name = "".join(ch if ch.isalnum() else "_" for ch in t)
    load = build_native(f"load_{name}", f"arr: wp.array(dtype={t}), i: int", "return arr.data[i];", ns, returns=t)
    store = build_native(f"store_{name}", f"arr: wp.array(dtype={t}), i: int, value: {t}", "arr.data[i] = value;", ns)
    return load, store


def type_expr(t: Any, namespace: dict[str, Any]) -> str:
    """Source text for a Warp type, adding it to ``namespace`` under a deterministic name."""
    if wp.types.is_array(t):
        inner = type_expr(t.dtype, namespace)
        return f"wp.array(dtype={inner}, ndim={t.ndim})"
    for alias, builtin in (("float", float), ("int", int), ("bool", bool)):
        if t is builtin:
            return alias
    name = "T_" + _type_name(t)
    namespace[name] = t
    return name


def _type_name(t: Any) -> str:
    base = getattr(t, "__name__", None) or type(t).__name__
    shape = "x".join(str(s) for s in getattr(t, "_shape_", ()))
    scalar = getattr(getattr(t, "_wp_scalar_type_", None), "__name__", "")
    return "".join(ch if ch.isalnum() else "_" for ch in f"{base}{shape}{scalar}")


def is_built(module: Any, device: str, block_dim: int | None = None) -> bool:
    """Whether loading ``module`` on ``device`` (for launches of ``block_dim`` lanes; None: Warp's default) needs no
    compile: loaded already, or in Warp's kernel cache.

    Reads Warp's cache layout (``<kernel_cache_dir>/<module identifier>/<output name>``); if that
    layout cannot be read, answers False, which only shows a progress bar that was not needed.
    """
    import os

    try:
        from warp._src.context import _resolve_launch_block_dim

        dev = wp.get_device(device)
        if block_dim is None:
            # What wp.load_module picks: a plain launch's block size on CPU, the module's on CUDA.
            block_dim = None if dev.is_cpu else module.options["block_dim"]
        block_dim = _resolve_launch_block_dim(dev, block_dim)
        if (dev.context, block_dim) in module.execs:
            return True
        folder = os.path.join(wp.config.kernel_cache_dir, module.get_module_identifier(block_dim))
        return os.path.exists(os.path.join(folder, module._get_compile_output_name(dev, block_dim=block_dim)))
    except Exception:
        return False


def load_modules(modules: list[tuple[Any, int | None]], device: str) -> None:
    """Loads (compiling where needed) ``modules`` on ``device``, each for launches of the block size beside it (None:
    Warp's default), with a progress bar on stderr when some compile.

    Nothing is shown when every module is cached. ``TQDM_DISABLE=1`` in the environment hides the bar.
    """
    import sys

    from tqdm import tqdm

    todo = [(m, b) for m, b in modules if not is_built(m, device, b)]
    bar = None
    if todo:
        bar = tqdm(total=len(todo), desc=f"compiling kernels for {device}", unit="module", file=sys.stderr, leave=False)
    try:
        for module, block_dim in modules:
            if bar is not None and (module, block_dim) in todo:
                bar.set_postfix_str(module.name, refresh=True)
            wp.load_module(module, device=device, block_dim=block_dim)
            if bar is not None and (module, block_dim) in todo:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
