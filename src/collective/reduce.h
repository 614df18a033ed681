// Element-wise reductions for every collective data type, used by every
// transport that reduces on the CPU.
#ifndef SHOAL_COLLECTIVE_REDUCE_H_
#define SHOAL_COLLECTIVE_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "shoal/collective.h"

namespace shoal::collective::internal {

// acc[i] = op(acc[i], in[i]) for i < count.
void ReduceInto(DataType type, ReduceOp op, void* acc, const void* in,
                size_t count);

// out[i] = op(a[i], b[i]); out may alias a or b.
void ReduceTwo(DataType type, ReduceOp op, void* out, const void* a,
               const void* b, size_t count);

// bfloat16 (stored as uint16) to and from float32, round to nearest even.
float BFloat16ToFloat(uint16_t value);
uint16_t FloatToBFloat16(float value);

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_REDUCE_H_
