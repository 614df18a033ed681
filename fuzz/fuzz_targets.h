// The fuzzing harnesses (fuzz/README.md). Each FuzzX() feeds one input to
// the code that reads one kind of untrusted bytes, the way the product does,
// and returns 0. Bad input must be rejected with a Status or an exception
// that the product catches; a crash, a sanitizer report or a failed
// SHOAL_FUZZ_CHECK is a bug.
//
// The libFuzzer binaries (<target>_fuzzer.cc) and fuzz_regression_test call
// these. Threading: call from one thread at a time; the harnesses that talk
// to servers start them (and their threads) on first use and keep them for
// the life of the process.
#ifndef SHOAL_FUZZ_FUZZ_TARGETS_H_
#define SHOAL_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace shoal::fuzz {

int FuzzRpcFrame(const uint8_t* data, size_t size);
int FuzzMsgpack(const uint8_t* data, size_t size);
int FuzzResourceJson(const uint8_t* data, size_t size);
int FuzzTpuType(const uint8_t* data, size_t size);
int FuzzObjectTransfer(const uint8_t* data, size_t size);
int FuzzSessionFile(const uint8_t* data, size_t size);
int FuzzOutputBytes(const uint8_t* data, size_t size);

// ---- Seeds ----
//
// A handful of valid and nearly valid inputs per target, in the form its
// harness reads; make_corpus.cc writes them into corpus/<target>/.
struct Seed {
  std::string name;  // its file name
  std::string input;
};
std::vector<Seed> RpcFrameSeeds();
std::vector<Seed> MsgpackSeeds();
std::vector<Seed> ResourceJsonSeeds();
std::vector<Seed> TpuTypeSeeds();
std::vector<Seed> ObjectTransferSeeds();
std::vector<Seed> SessionFileSeeds();
std::vector<Seed> OutputBytesSeeds();

struct Target {
  const char* name;  // <name>_fuzzer, corpus/<name>/, regressions/<name>/
  int (*fuzz)(const uint8_t* data, size_t size);
  std::vector<Seed> (*seeds)();
};
inline constexpr Target kTargets[] = {
    {"rpc_frame", &FuzzRpcFrame, &RpcFrameSeeds},
    {"msgpack", &FuzzMsgpack, &MsgpackSeeds},
    {"resource_json", &FuzzResourceJson, &ResourceJsonSeeds},
    {"tpu_type", &FuzzTpuType, &TpuTypeSeeds},
    {"object_transfer", &FuzzObjectTransfer, &ObjectTransferSeeds},
    {"session_file", &FuzzSessionFile, &SessionFileSeeds},
    {"output_bytes", &FuzzOutputBytes, &OutputBytesSeeds},
};

// A TCP connection to 127.0.0.1:port, with TCP_NODELAY (the harnesses
// that drive a real server over loopback). A signal (libFuzzer's timeout
// alarm) that interrupts the connect does not fail it.
int ConnectLoopback(int port);

// The next connection on a listening socket; retries a call a signal
// interrupted.
int AcceptLoopback(int listen_fd);

}  // namespace shoal::fuzz

// An invariant of the code under test; failing it is a bug (libFuzzer keeps
// the input that did it).
#define SHOAL_FUZZ_CHECK(cond)                                         \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                   \
      std::abort();                                                    \
    }                                                                  \
  } while (false)

#endif  // SHOAL_FUZZ_FUZZ_TARGETS_H_
