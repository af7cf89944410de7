"""The forward kernel compiled for an sm_90 GPU on any machine (no GPU needed), read as SASS.

Triton ships ptxas and nvdisasm, so `forward_sass` gives the machine code a Hopper launch
would run. Two uses: `tools/sass_loop.py` counts the hot loop's instructions per key tile
(docs/kernel-performance.md), and the tests check that the heuristic launch configs never
spill registers inside that loop. Compiling needs the real compiler: TRITON_INTERPRET must be
unset when `flashprobe.kernels` is first imported (the tests run it in a subprocess).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_POINTERS = {
    **dict.fromkeys(("Q", "K", "V", "Out"), "*bf16"),
    **dict.fromkeys(("O32", "LSE", "ROW_MAX"), "*fp32"),
    **dict.fromkeys(("TIE_EVENTS", "P_ONES"), "*i32"),
}
_BWD_POINTERS = {
    **dict.fromkeys(("Q", "K", "V", "DO", "DQ", "DK", "DV"), "*bf16"),
    **dict.fromkeys(("LSE", "DELTA"), "*fp32"),
}
_DELTA_POINTERS = {
    **dict.fromkeys(("Out", "DO", "Q", "K", "V"), "*bf16"),
    **dict.fromkeys(("O32", "DELTA", "LSE"), "*fp32"),
}
_INTS = {"H", "M", "N", "tile_n"}
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", re.M)


#: Shared memory a block may use on an H100 or H200 (227 KB).
SM90_SHARED_MEMORY = 232448


def compile_forward(
    constexprs: dict[str, Any], num_warps: int, num_stages: int, max_registers: int | None = None
) -> Any:
    """`attn_fwd_kernel` compiled for sm_90a with these constexprs (bf16 inputs): Triton's
    CompiledKernel (`.asm["cubin"]`, `.metadata.shared` in bytes, ...). `max_registers` is
    the launch option `maxnreg` (tuning.FwdConfig.max_registers).

    Pointers and strides are specialised as a launch with 16-aligned ones would be.
    """
    from flashprobe.kernels.forward import attn_fwd_kernel

    return _compile(attn_fwd_kernel, _POINTERS, constexprs, num_warps, num_stages, max_registers)


def compile_backward(constexprs: dict[str, Any], num_warps: int, num_stages: int) -> Any:
    """`attn_bwd_kernel` (dQ, dK, dV) compiled for sm_90a, as `compile_forward`. With
    ATOMIC_DQ (default off) DQ is the fp32 buffer the key blocks add into."""
    from flashprobe.kernels.backward import attn_bwd_kernel

    constexprs = {"ATOMIC_DQ": False, "KEY_MASK": False, **constexprs}
    pointers = {**_BWD_POINTERS, "DQ": "*fp32"} if constexprs["ATOMIC_DQ"] else _BWD_POINTERS
    return _compile(attn_bwd_kernel, pointers, constexprs, num_warps, num_stages)


def compile_delta(constexprs: dict[str, Any], num_warps: int, num_stages: int) -> Any:
    """`attn_bwd_preprocess_kernel` (δ) compiled for sm_90a, as `compile_forward`."""
    from flashprobe.kernels.backward import attn_bwd_preprocess_kernel

    return _compile(attn_bwd_preprocess_kernel, _DELTA_POINTERS, constexprs, num_warps, num_stages)


def _compile(
    kernel_fn: Any,
    pointers: dict[str, str],
    constexprs: dict[str, Any],
    num_warps: int,
    num_stages: int,
    max_registers: int | None = None,
) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    if not hasattr(kernel_fn, "arg_names"):
        raise RuntimeError("compiling needs TRITON_INTERPRET unset when flashprobe is imported")
    target = GPUTarget("cuda", 90, 32)
    names = kernel_fn.arg_names
    # One query head per key/value head: Triton specialises an int argument equal to 1 away.
    # Loads through pointers unless asked (tuning.FwdConfig.tma).
    constexprs = {"GROUP": 1, **({"TMA": False} if "TMA" in names else {}), **constexprs}
    signature = {}
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
        elif name.startswith("stride") or name in _INTS:
            signature[name] = "i32"
        else:
            signature[name] = "fp32"
    divisible = make_backend(target).parse_attr("D")  # "divisible by 16"
    attrs = {(i,): divisible for i, n in enumerate(names) if signature[n][0] in "*i"}
    source = ASTSource(fn=kernel_fn, signature=signature, constexprs=constexprs,
                       attrs=attrs)  # fmt: skip
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": False}
    if max_registers is not None:
        options["maxnreg"] = max_registers
    return triton.compile(source, target=target, options=options)


def forward_sass(constexprs: dict[str, Any], num_warps: int, num_stages: int) -> str:
    """SASS text of `compile_forward(constexprs, num_warps, num_stages)`."""
    return disassemble(compile_forward(constexprs, num_warps, num_stages))


def disassemble(kernel: Any) -> str:
    """SASS text of a compiled kernel (Triton's bundled nvdisasm)."""
    return _cuda_tool("nvdisasm", "-c", kernel)


def registers(kernel: Any) -> int:
    """Registers per thread of a compiled kernel (Triton's bundled cuobjdump): with 65536 per
    SM, how many blocks of its warps can share one."""
    usage = _cuda_tool("cuobjdump", "--dump-resource-usage", kernel)
    return int(re.search(r"REG:(\d+)", usage).group(1))


def _cuda_tool(tool: str, flag: str, kernel: Any) -> str:
    import triton

    binary = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        return subprocess.run([str(binary), flag, str(cubin)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip


def opcodes(sass: str) -> list[str]:
    """Every instruction's opcode, in order (predicates dropped)."""
    return _INSTRUCTION.findall(sass)


def first_loop(sass: str) -> list[str]:
    """Opcodes of the first backward-branching loop (label .L_x_N ... BRA `(.L_x_N))."""
    lines = sass.splitlines()
    for end, line in enumerate(lines):
        branch = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if not branch:
            continue
        label = branch.group(1) + ":"
        starts = [i for i in range(end) if lines[i].strip().startswith(label)]
        if starts:
            return opcodes("\n".join(lines[starts[0] : end + 1]))
    return []


def local_memory_ops(ops: list[str]) -> int:
    """Register spill traffic among these opcodes: local-memory loads and stores (LDL, STL)."""
    return sum(op in ("LDL", "STL") for op in ops)
