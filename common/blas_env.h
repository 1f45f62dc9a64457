// OpenBLAS core selection. Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs and
// falls back to slow SSE3 kernels; OPENBLAS_CORETYPE fixes that but is read when the
// library loads, i.e. before main(). SelectOpenblasCoretype() therefore re-executes the
// process once with the variable set (SkylakeX with AVX-512, Haswell with AVX2) when the
// user has not set it, and logs the choice. MLCD_NO_BLAS_TUNING=1 turns it off (tests and CI
// set it so their results never depend on the CPU).
#pragma once

namespace mlcd {

// Call first in main() of programs whose speed depends on BLAS. Returns normally when
// nothing needs to change; otherwise does not return (execv).
void SelectOpenblasCoretype(int argc, char** argv);

}  // namespace mlcd
