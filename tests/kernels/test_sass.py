"""Reading SASS text (flashprobe.kernels.sass): opcodes, the first loop, spill traffic.

Compiling is tested where it is used (tests/kernels/test_tuning.py); here the parsing runs on a
hand-written listing in nvdisasm's format, including addresses past 0xffff.
"""

from __future__ import annotations

from flashprobe.kernels import sass

LISTING = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
        /*0010*/              @!PT LDS RZ, [RZ] ;                           /* 0x00000000fffffb84 */
.L_x_3:
        /*fff0*/                   FMNMX R4, R4, R5, !PT ;                  /* 0x0000000504047209 */
        /*10000*/                  STL [R1+0x8], R4 ;                       /* 0x0000080401007387 */
        /*10010*/         @P0 BRA `(.L_x_3) ;                               /* 0xfffffffc00e00947 */
        /*10020*/                  LDL R6, [R1+0x8] ;                       /* 0x0000080001067983 */
        /*10030*/                  EXIT ;                                   /* 0x000000000000794d */
"""


def test_opcodes_keeps_every_instruction_and_drops_predicates() -> None:
    assert sass.opcodes(LISTING) == ["LDC", "LDS", "FMNMX", "STL", "BRA", "LDL", "EXIT"]


def test_first_loop_spans_label_to_backward_branch() -> None:
    assert sass.first_loop(LISTING) == ["FMNMX", "STL", "BRA"]
    assert sass.first_loop("        /*0000*/ EXIT ;") == []


def test_local_memory_ops_counts_spill_loads_and_stores() -> None:
    assert sass.local_memory_ops(sass.opcodes(LISTING)) == 2
    assert sass.local_memory_ops(sass.first_loop(LISTING)) == 1
