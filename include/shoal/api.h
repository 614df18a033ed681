// The whole Shoal API (the same as shoal/shoal.h, which programs may include
// instead).
#ifndef SHOAL_API_H_
#define SHOAL_API_H_

#include "shoal/shoal.h"  // IWYU pragma: export

#endif  // SHOAL_API_H_
