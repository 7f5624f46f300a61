// placeholder, replaced below
#include "kernels/cpu/matmul_internal.h"
namespace flashspec::cpu {
const IsaKernels& avx512_kernels() { return avx2_kernels(); }
}
