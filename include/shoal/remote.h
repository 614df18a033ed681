// SHOAL_REMOTE: registering remote functions, actor factories and methods.
#ifndef SHOAL_REMOTE_H_
#define SHOAL_REMOTE_H_

#include "shoal/internal/invoke.h"

// Registers free functions as remote functions by name, and actors'
// factories and methods:
//   SHOAL_REMOTE(Add, Multiply);
//   SHOAL_REMOTE(CreateCounter, &Counter::Add, &Counter::Get);
// Use it at namespace scope, once per function, in any source file of the
// program.
#define SHOAL_REMOTE_CONCAT_INNER(a, b) a##b
#define SHOAL_REMOTE_CONCAT(a, b) SHOAL_REMOTE_CONCAT_INNER(a, b)
#define SHOAL_REMOTE(...)                                 \
  [[maybe_unused]] static const bool SHOAL_REMOTE_CONCAT( \
      shoal_remote_registered_, __COUNTER__) =            \
      ::shoal::internal::RegisterFunctions(#__VA_ARGS__, __VA_ARGS__)

#endif  // SHOAL_REMOTE_H_
