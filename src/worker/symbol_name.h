// The name a function was given in its source, found from its address, for
// messages about a function the user passed by pointer.
#ifndef SHOAL_WORKER_SYMBOL_NAME_H_
#define SHOAL_WORKER_SYMBOL_NAME_H_

#include <string>

namespace shoal::internal {

// The demangled name of the function at `address`
// ("shoal_test::NotRegistered(int)"), from the dynamic symbols, else from
// the symbol table of the file it was loaded from; "" when neither has it
// (a stripped binary). Reads that file: not for hot paths. Thread-safe.
std::string SymbolName(const void* address);

// "NotRegistered" of "shoal_test::NotRegistered(int)": the name without
// its scope and parameters.
std::string UnqualifiedName(const std::string& symbol);

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_SYMBOL_NAME_H_
