#include "cli/context.h"

#include <signal.h>
#include <unistd.h>

#include <iostream>

#include "cli/host.h"

namespace shoal::cli {
namespace {

// What a Ctrl-C says; made before the handler can run, which only writes
// it.
const std::string* g_interrupt_note = nullptr;

void SayNoteAndExit(int) {
  ssize_t ignored =
      write(STDERR_FILENO, g_interrupt_note->data(), g_interrupt_note->size());
  (void)ignored;
  _exit(128 + SIGINT);
}

void OnInterrupt(const std::string& note) {
  static std::string kept;
  kept = note;
  g_interrupt_note = &kept;
  struct sigaction action = {};
  action.sa_handler = SayNoteAndExit;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

Context SystemContext() {
  return Context{&std::cout, &std::cerr, &SystemHost(), ConnectToHead,
                 OnInterrupt};
}

}  // namespace shoal::cli
