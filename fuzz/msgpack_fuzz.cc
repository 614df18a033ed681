// msgpack: task arguments, results and objects as a worker or a driver
// reads them (shoal::internal::UnpackValue and the invokers SHOAL_REMOTE
// registers), from bytes that another process sent.
//
// Input: byte 0 picks the C++ type to read (kReaders, by number); byte 1
// says how: bit 0 set, the bytes are raw store bytes (a Buffer put into the
// object store) rather than msgpack. The rest is the value. The last reader
// calls a registered-style function of three parameters: bytes 2 and 3 give
// the lengths of its first two arguments, which follow, then the third.
//
// Unpacking may throw (msgpack::type_error, msgpack::unpack_error,
// std::invalid_argument): the worker catches std::exception and fails the
// task with it, so such inputs are rejected, not bugs.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "shoal/buffer.h"
#include "shoal/internal/invoke.h"
#include "shoal/serialization.h"

namespace shoal::fuzz {
namespace {

using internal::ObjectValue;

// A user type as programs define them.
struct Sample {
  std::string name;
  std::vector<float> values;
  int64_t step = 0;
  std::map<std::string, std::string> tags;
  bool operator==(const Sample&) const = default;
  MSGPACK_DEFINE(name, values, step, tags);
};

template <typename T>
constexpr bool kHasFloats = std::is_floating_point_v<T>;
template <typename K, typename V>
constexpr bool kHasFloats<std::map<K, V>> = kHasFloats<V>;
template <typename T>
constexpr bool kHasFloats<std::vector<T>> = kHasFloats<T>;
template <typename... T>
constexpr bool kHasFloats<std::tuple<T...>> = (kHasFloats<T> || ...);
template <>
constexpr bool kHasFloats<Sample> = true;

// What a value read from msgpack packs back into: itself (floats aside,
// since NaN is not equal to itself).
template <typename T>
void CheckRoundTrip(const T& value) {
  std::string packed = internal::Pack(value);
  T again = internal::Unpack<T>(packed);
  if constexpr (!kHasFloats<T>) {
    SHOAL_FUZZ_CHECK(again == value);
  } else {
    SHOAL_FUZZ_CHECK(internal::Pack(again) == packed);
  }
}

// msgpack-c 4.1 packs a float or a double near 2^64 by converting it to
// uint64_t first, which is undefined behaviour in msgpack-c itself
// (packer::pack_double and pack_float compare with the float or double of
// UINT64_MAX, which is 2^64). Values that hold a number of 2^63 or more in
// magnitude, or an integer that becomes one, are not packed back.
bool Holds2To64(const msgpack::object& o) {
  constexpr double k2To63 = 9223372036854775808.0;
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return !(std::fabs(o.via.f64) < k2To63);
    case msgpack::type::POSITIVE_INTEGER:
      return static_cast<double>(o.via.u64) >= k2To63;
    case msgpack::type::ARRAY:
      return std::any_of(o.via.array.ptr, o.via.array.ptr + o.via.array.size,
                         Holds2To64);
    case msgpack::type::MAP:
      return std::any_of(o.via.map.ptr, o.via.map.ptr + o.via.map.size,
                         [](const msgpack::object_kv& kv) {
                           return Holds2To64(kv.key) || Holds2To64(kv.val);
                         });
    default:
      return false;
  }
}

template <typename T>
void Read(const ObjectValue& value) {
  T read = internal::UnpackValue<T>(value);
  if constexpr (kHasFloats<T>) {
    if (Holds2To64(
            msgpack::unpack(value.data.data(), value.data.size()).get())) {
      return;
    }
  }
  if constexpr (std::is_same_v<T, Buffer>) {
    // What travels inline reads back as the same bytes.
    ObjectValue inline_value = ObjectValue::Owned(internal::ToMsgpack(value));
    SHOAL_FUZZ_CHECK(internal::UnpackValue<Buffer>(inline_value) == read);
  } else if constexpr (!std::is_same_v<
                           T, std::unordered_map<std::string, int64_t>>) {
    CheckRoundTrip(read);
  }
}

// A remote function as a program registers it.
int64_t Combine(std::string name, std::vector<double> values, Buffer blob) {
  return static_cast<int64_t>(name.size() + values.size() + blob.size());
}

void Invoke(std::string_view rest, bool raw) {
  if (rest.size() < 2) return;
  size_t first = static_cast<uint8_t>(rest[0]);
  size_t second = static_cast<uint8_t>(rest[1]);
  rest.remove_prefix(2);
  std::vector<ObjectValue> args;
  for (size_t length : {first, second, rest.size()}) {
    length = std::min(length, rest.size());
    args.push_back({rest.substr(0, length), false, nullptr});
    rest.remove_prefix(length);
  }
  // As a worker passes a stored argument: raw bytes.
  args[2].raw = raw;
  internal::Invoker invoker = internal::MakeInvoker(&Combine);
  ObjectValue result = invoker(args);
  internal::Unpack<int64_t>(result.data);
}

using Reader = void (*)(const ObjectValue& value);

constexpr Reader kReaders[] = {
    &Read<bool>,
    &Read<int64_t>,
    &Read<uint64_t>,
    &Read<int8_t>,
    &Read<double>,
    &Read<float>,
    &Read<std::string>,
    &Read<std::vector<int>>,
    &Read<std::vector<std::string>>,
    &Read<std::map<std::string, double>>,
    &Read<std::map<int, std::vector<double>>>,
    &Read<std::tuple<int, std::string, std::vector<double>>>,
    &Read<std::pair<std::string, int64_t>>,
    &Read<std::optional<std::string>>,
    &Read<std::vector<std::vector<int>>>,
    &Read<std::array<int, 4>>,
    &Read<std::unordered_map<std::string, int64_t>>,
    &Read<std::set<int>>,
    &Read<std::vector<uint8_t>>,
    &Read<std::vector<char>>,
    &Read<Buffer>,
    &Read<Sample>,
};
constexpr int kNumReaders = std::size(kReaders);
constexpr int kInvokeSelector = kNumReaders;

template <typename T>
std::string Input(std::string_view msgpack, bool raw = false) {
  int index = 0;
  while (kReaders[index] != &Read<T>) ++index;
  std::string input;
  input += static_cast<char>(index);
  input += static_cast<char>(raw ? 1 : 0);
  input += msgpack;
  return input;
}

template <typename T>
std::string Packed(const T& value) {
  return Input<T>(internal::Pack(value));
}

}  // namespace

std::vector<Seed> MsgpackSeeds() {
  using internal::Pack;
  std::vector<Seed> seeds = {
      {"bool", Packed(true)},
      {"int64", Packed(int64_t{-5})},
      {"uint64", Packed(uint64_t{1} << 63)},
      {"int8_out_of_range", Input<int8_t>(Pack(300))},
      {"double", Packed(1.5)},
      {"float_from_double", Input<float>(Pack(1e300))},
      {"string", Packed(std::string("hello"))},
      {"vector_int", Packed(std::vector<int>{1, -2, 3})},
      {"vector_string", Packed(std::vector<std::string>{"a", "", "ccc"})},
      {"map_string_double",
       Packed(std::map<std::string, double>{{"CPU", 1.5}, {"GPU", 2}})},
      {"map_int_vector",
       Packed(std::map<int, std::vector<double>>{{1, {0.5}}, {-3, {}}})},
      {"tuple",
       Packed(std::make_tuple(7, std::string("x"), std::vector<double>{1, 2}))},
      {"pair", Packed(std::make_pair(std::string("step"), int64_t{9}))},
      {"optional_nil", Input<std::optional<std::string>>(internal::PackNil())},
      {"optional", Packed(std::optional<std::string>("set"))},
      {"nested_vectors",
       Packed(std::vector<std::vector<int>>{{1}, {}, {2, 3}})},
      {"array_too_short", Input<std::array<int, 4>>(Pack(std::vector<int>{1}))},
      {"unordered_map",
       Packed(std::unordered_map<std::string, int64_t>{{"a", 1}})},
      {"set", Packed(std::set<int>{3, 1, 2})},
      {"bytes", Packed(std::vector<uint8_t>{0, 255, 7})},
      {"chars", Packed(std::vector<char>{'a', 'b'})},
      {"buffer_inline", Packed(Buffer::FromString("tensor bytes"))},
      {"buffer_raw", Input<Buffer>("raw store bytes", /*raw=*/true)},
      {"string_raw", Input<std::string>("raw store bytes", /*raw=*/true)},
      {"sample", Packed(Sample{"loss", {0.5f, 0.25f}, 100, {{"run", "a"}}})},
      {"wrong_type", Input<std::vector<int>>(Pack(std::string("nope")))},
      {"truncated", Input<std::vector<std::string>>(
                        Pack(std::vector<std::string>{"abcdef"}).substr(0, 4))},
  };
  std::string name = Pack(std::string("w"));
  std::string values = Pack(std::vector<double>{1, 2, 3});
  std::string blob = Pack(Buffer::FromString("blob"));
  std::string call;
  call += static_cast<char>(name.size());
  call += static_cast<char>(values.size());
  call += name + values + blob;
  seeds.push_back(
      {"invoke", std::string(1, static_cast<char>(kInvokeSelector)) +
                     std::string(1, '\0') + call});
  seeds.push_back(
      {"invoke_raw_blob", std::string(1, static_cast<char>(kInvokeSelector)) +
                              std::string(1, '\1') + call.substr(0, 2) + name +
                              values + "raw blob"});
  return seeds;
}

int FuzzMsgpack(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int selector = data[0] % (kNumReaders + 1);
  const bool raw = (data[1] & 1) != 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  // The worker owns the bytes (a string from the request) while it reads.
  auto owned = std::make_shared<std::string>(rest);
  try {
    if (selector == kInvokeSelector) {
      Invoke(*owned, raw);
    } else {
      kReaders[selector](ObjectValue{*owned, raw, owned});
    }
  } catch (const std::exception&) {
    // Rejected: the task fails with this error.
  }
  return 0;
}

}  // namespace shoal::fuzz
