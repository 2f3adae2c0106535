"""Where an env's CUDA kernels spill registers, by the Python function the spilling code comes from, with no GPU.

``ptxas -v`` gives a kernel's spill bytes in all; this says where they sit. The env's CUDA modules (as a CUDA
``BatchSim`` loads them, ``tests.cuda_codegen``) are compiled for sm_90 by NVRTC with line information, assembled by
``ptxas``, and disassembled by ``nvdisasm``; each local-memory load and store that ptxas marks as a spill or refill
is counted at the innermost frame of its inlining chain that lies in this repository (``systems/``, ``envs/``,
``ecs/``). The other local-memory accesses are counted apart: arrays and the slow paths of CUDA's math library (the
range reduction of ``sinf`` and ``cosf`` for arguments past about 1e5, which ptxas does not count as spills and
which never runs in a step). A spill in a loop over manifolds costs every manifold; one at a kernel's start or at a
loop's head costs little.

    pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm   # ptxas and nvdisasm (about 100 MB; no GPU, no driver)
    python examples/benchmarks/spill_sites.py hide_and_seek --module 'step_bodies_solve' [--lines]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE_DIRS = ("systems", "envs", "ecs")
FRAME = re.compile(r'File "([^"]+)", line (\d+)')
SECTION = re.compile(r"^\s*\.section\s+\.text\.([A-Za-z_][\w$]*)")
LOCAL = re.compile(r"\b(LDL|STL)(\.\w+)*\s")
PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
PTXAS_STATS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}


@dataclass
class KernelSpills:
    """One kernel's local-memory instructions: spills and refills by (file, function, load or store), by
    (file, line, load or store), and the other local-memory accesses (arrays, math-library slow paths)."""

    spills: collections.Counter = field(default_factory=collections.Counter)
    lines: collections.Counter = field(default_factory=collections.Counter)
    other: int = 0


def find_tools(bin_dir: str | None) -> tuple[str, str]:
    """``ptxas`` and ``nvdisasm`` from one folder: ``bin_dir``, else the ``nvidia-cuda-nvcc`` and
    ``nvidia-cuda-nvdisasm`` wheels' ``nvidia/cu*/bin``, else ``PATH`` (a ptxas older than Warp's NVRTC refuses its
    PTX, so the wheels, which pip matches to one release, come before a system toolkit)."""
    dirs = [bin_dir] if bin_dir else []
    for site in sys.path:
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "bin")), reverse=True)
    dirs += os.environ.get("PATH", "").split(os.pathsep)
    found: dict[str, str] = {}
    for d in filter(None, dirs):
        here = {tool: shutil.which(tool, path=d) for tool in ("ptxas", "nvdisasm")}
        if all(here.values()):
            return here["ptxas"], here["nvdisasm"]
        for tool, path in here.items():
            if path:
                found.setdefault(tool, path)
    if len(found) == 2:
        return found["ptxas"], found["nvdisasm"]
    missing = [t for t in ("ptxas", "nvdisasm") if t not in found]
    raise SystemExit(
        f"spill_sites: {' and '.join(missing)} not found (looked in --bin, the nvidia wheels and PATH); "
        "install them with `pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm` or pass --bin DIR"
    )


def run_tool(cmd: list[str]) -> subprocess.CompletedProcess:
    """Runs ``cmd``; where it fails, exits naming the tool and its complaint."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"spill_sites: {cmd[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}\n"
            "A ptxas older than Warp's NVRTC cannot read its PTX: install a matching one "
            "(`pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm`) or pass --bin DIR"
        )
    return proc


def function_spans(path: str, cache: dict) -> list[tuple[int, int, str]]:
    if path not in cache:
        import ast

        try:
            with open(path) as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError):
            tree = ast.Module(body=[], type_ignores=[])
        cache[path] = [
            (n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
        ]
    return cache[path]


def enclosing_function(path: str, line: int, cache: dict) -> str:
    """The innermost ``def`` of ``path`` that holds ``line``, or ``?``."""
    best = None
    for first, last, name in function_spans(path, cache):
        if first <= line <= last and (best is None or first > best[0]):
            best = (first, name)
    return best[1] if best else "?"


def spill_sites(sass: str, root: str = ROOT) -> dict[str, KernelSpills]:
    """The local-memory instructions of each kernel in ``nvdisasm -gi`` output, spills and refills (marked
    ``SpillRefill``) at the innermost frame of their inlining chain under ``root``'s source folders."""
    roots = tuple(os.path.join(os.path.abspath(root), d) + os.sep for d in SOURCE_DIRS)
    kernels: dict[str, KernelSpills] = {}
    spans: dict = {}
    kernel = None
    chain: list[tuple[str, int]] = []
    in_header = False
    for line in sass.splitlines():
        section = SECTION.match(line)
        if section:
            kernel = section.group(1)
            kernels.setdefault(kernel, KernelSpills())
            continue
        if line.lstrip().startswith("//##"):
            if not in_header:
                chain = []
            in_header = True
            chain += [(f, int(n)) for f, n in FRAME.findall(line)]
            continue
        in_header = False
        if kernel is None or not LOCAL.search(line):
            continue
        record = kernels[kernel]
        if "SpillRefill" not in line:
            record.other += 1
            continue
        kind = "load" if "LDL" in line else "store"
        ours = [(f, n) for f, n in chain if f.startswith(roots)]
        if ours:
            path, n = ours[0]
            name = os.path.relpath(path, root)
            record.spills[(name, enclosing_function(path, n, spans), kind)] += 1
            record.lines[(name, n, kind)] += 1
        else:
            record.spills[("?", "?", kind)] += 1
    return kernels


def ptxas_stats(log: str) -> dict[str, dict[str, int]]:
    """``ptxas -v`` output: each entry function's registers, stack frame and spill bytes."""
    stats = {}
    for block in log.split("Compiling entry function")[1:]:
        name = PTXAS_ENTRY.search("Compiling entry function" + block).group(1)
        stats[name] = {k: int(m.group(1)) for k, p in PTXAS_STATS.items() if (m := p.search(block))}
    return stats


def report(name: str, stats: dict[str, int], record: KernelSpills, show_lines: bool) -> str:
    out = [f"### `{name}`", ""]
    if stats:
        out.append(
            f"ptxas: {stats.get('registers', '?')} registers, {stats.get('stack', '?')} B stack, "
            f"{stats.get('spill_stores', '?')} B spill stores, {stats.get('spill_loads', '?')} B spill loads; "
            f"{record.other} other local-memory instructions (arrays, math-library slow paths)"
        )
        out.append("")

    def total(site: tuple[str, str]) -> int:
        return record.spills[(*site, "load")] + record.spills[(*site, "store")]

    rows = sorted({(p, f) for p, f, _ in record.spills}, key=lambda site: (-total(site), site))
    if not rows:
        out.append("no spills")
        return "\n".join(out) + "\n"
    out += ["| source | function | spill stores | refills |", "|---|---|---:|---:|"]
    for path, fn in rows:
        out.append(f"| {path} | `{fn}` | {record.spills[(path, fn, 'store')]} | {record.spills[(path, fn, 'load')]} |")
    if show_lines:
        out += ["", "| source:line | spill stores | refills |", "|---|---:|---:|"]
        for path, n in sorted({(p, n) for p, n, _ in record.lines}):
            out.append(f"| {path}:{n} | {record.lines[(path, n, 'store')]} | {record.lines[(path, n, 'load')]} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env", help="an env's name (envs.names())")
    parser.add_argument("--module", default="", help="a regular expression: only the modules whose name it finds")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--bin", help="the folder of ptxas and nvdisasm")
    parser.add_argument("--lines", action="store_true", help="also count the spills by source line")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the env's config (a YAML value), e.g. solver_order=true; repeatable",
    )
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    import warp as wp

    import envs

    if args.env not in envs.names():
        parser.error(f"unknown env {args.env!r}; one of {', '.join(envs.names())}")
    ptxas, nvdisasm = find_tools(args.bin)
    wp.config.quiet = True
    wp.config.lineinfo = True  # Python source lines in the CUDA code (a CPU build of its own, cached after the first)
    wp.init()
    from tests.cuda_codegen import cuda_modules

    env = envs.make(args.env, **envs.parse_overrides(args.set))
    modules = {n: m for n, m in sorted(cuda_modules(env).items()) if re.search(args.module, n)}
    if not modules:
        parser.error(f"--module {args.module!r} finds none of {args.env}'s CUDA modules")
    with tempfile.TemporaryDirectory() as tmp:
        for name, module in modules.items():
            folder = os.path.join(tmp, re.sub(r"\W", "_", name))
            os.makedirs(folder)
            wp.compile_aot_module(module, arch=args.arch, module_dir=folder, use_ptx=True)
            for ptx in glob.glob(os.path.join(folder, "*.ptx")):
                with open(ptx, "rb") as f:
                    text = f.read().replace(b"\0", b"")  # NVRTC's PTX ends in NUL bytes that ptxas refuses
                with open(ptx, "wb") as f:
                    f.write(text)
                cubin = ptx[: -len(".ptx")] + ".cubin"
                log = run_tool([ptxas, f"-arch=sm_{args.arch}", "-v", "-lineinfo", "-o", cubin, ptx]).stderr
                sass = run_tool([nvdisasm, "-gi", "-c", cubin]).stdout
                stats = ptxas_stats(log)
                for kernel, record in spill_sites(sass).items():
                    if "backward" not in kernel:
                        print(report(kernel, stats.get(kernel, {}), record, args.lines))


if __name__ == "__main__":
    main()
