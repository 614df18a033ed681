#include "worker/function_registry.h"

#include <msgpack.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/serialization.h"

namespace shoal_test_functions {

struct Point {
  int x = 0;
  int y = 0;
  std::string name;
  MSGPACK_DEFINE(x, y, name);
  bool operator==(const Point&) const = default;
};

int Add(int a, int b) { return a + b; }
std::string Greet(std::string name) { return "hello, " + name; }
Point Move(const Point& p, int dx) { return {p.x + dx, p.y, p.name}; }
std::vector<double> Scale(std::vector<double> v, double by) {
  for (double& x : v) x *= by;
  return v;
}
int g_side_effect = 0;
void SetSideEffect(int value) { g_side_effect = value; }
int Fail(int) { throw std::runtime_error("task failed on purpose"); }
int NotRegistered(int a) { return a; }

SHOAL_REMOTE(Add, Greet, Move);
SHOAL_REMOTE(Scale);
SHOAL_REMOTE(SetSideEffect, Fail);

}  // namespace shoal_test_functions

namespace shoal::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
namespace fns = ::shoal_test_functions;

const void* Address(auto fn) { return reinterpret_cast<const void*>(fn); }

// Runs the invoker registered under `name` with `args` (already packed).
std::string Invoke(const std::string& name,
                   const std::vector<std::string>& args) {
  const Invoker* invoker = FindInvoker(name);
  if (invoker == nullptr) throw std::logic_error("no invoker for " + name);
  std::vector<ObjectValue> values;
  for (const auto& a : args) values.push_back({a, false, nullptr});
  return ToMsgpack((*invoker)(values));
}

TEST(SplitFunctionNamesTest, SplitsAndTrims) {
  struct Case {
    const char* names;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"Add", {"Add"}},
      {"a, b,c", {"a", "b", "c"}},
      {" a ,\tb\n", {"a", "b"}},
      {"ns::f, &g", {"ns::f", "g"}},
      {"", {""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.names);
    EXPECT_THAT(SplitFunctionNames(c.names), ElementsAreArray(c.want));
  }
}

TEST(FunctionRegistryTest, FunctionNameIsTheRegisteredName) {
  struct Case {
    const void* address;
    std::string want;
  };
  const std::vector<Case> cases = {
      {Address(&fns::Add), "Add"},
      {Address(&fns::Greet), "Greet"},
      {Address(&fns::Move), "Move"},
      {Address(&fns::Scale), "Scale"},
      {Address(&fns::SetSideEffect), "SetSideEffect"},
      {Address(&fns::Fail), "Fail"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    EXPECT_EQ(FunctionName(c.address), c.want);
    EXPECT_NE(FindInvoker(c.want), nullptr);
  }
}

TEST(FunctionRegistryTest, UnregisteredFunctionNameThrowsWithTheFix) {
  // It names the function, and the line that registers it.
  EXPECT_THAT(
      [] { FunctionName(Address(&fns::NotRegistered)); },
      ThrowsMessage<shoal::Error>(HasSubstr(
          "shoal_test_functions::NotRegistered(int) is not a remote function: "
          "register it with SHOAL_REMOTE(NotRegistered) at namespace scope")));
  EXPECT_EQ(FindInvoker("NotRegistered"), nullptr);
  EXPECT_EQ(FindInvoker(""), nullptr);
}

TEST(FunctionRegistryTest, InvokesWithPackedArguments) {
  EXPECT_EQ(Unpack<int>(Invoke("Add", {Pack(2), Pack(40)})), 42);
  EXPECT_EQ(Unpack<std::string>(Invoke("Greet", {Pack(std::string("shoal"))})),
            "hello, shoal");
  EXPECT_EQ(Unpack<fns::Point>(
                Invoke("Move", {Pack(fns::Point{1, 2, "p"}), Pack(10)})),
            (fns::Point{11, 2, "p"}));
  EXPECT_THAT(Unpack<std::vector<double>>(Invoke(
                  "Scale", {Pack(std::vector<double>{1, 2.5}), Pack(2.0)})),
              ElementsAre(2.0, 5.0));
}

TEST(FunctionRegistryTest, VoidFunctionRunsAndReturnsNil) {
  fns::g_side_effect = 0;
  std::string result = Invoke("SetSideEffect", {Pack(7)});
  EXPECT_EQ(fns::g_side_effect, 7);
  EXPECT_EQ(result, PackNil());
  msgpack::object_handle handle = msgpack::unpack(result.data(), result.size());
  EXPECT_TRUE(handle.get().is_nil());
}

TEST(FunctionRegistryTest, ExceptionFromTheFunctionPropagates) {
  EXPECT_THAT(
      [] { Invoke("Fail", {Pack(1)}); },
      ThrowsMessage<std::runtime_error>(HasSubstr("task failed on purpose")));
}

TEST(FunctionRegistryTest, WrongArgumentCountThrowsInvalidArgument) {
  struct Case {
    std::string label;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {"none", {}},
      {"one too few", {Pack(1)}},
      {"one too many", {Pack(1), Pack(2), Pack(3)}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    EXPECT_THAT(
        [&] { Invoke("Add", c.args); },
        ThrowsMessage<std::invalid_argument>(HasSubstr(
            "expects 2 arguments, got " + std::to_string(c.args.size()))));
  }
}

TEST(FunctionRegistryTest, WrongArgumentTypeThrowsMsgpackError) {
  EXPECT_THROW(Invoke("Add", {Pack(std::string("one")), Pack(2)}),
               msgpack::type_error);
  EXPECT_THROW(Invoke("Greet", {Pack(3)}), msgpack::type_error);
  EXPECT_THROW(Invoke("Move", {Pack(std::string("not a point")), Pack(1)}),
               msgpack::type_error);
}

TEST(FunctionRegistryTest, TruncatedArgumentThrowsMsgpackError) {
  std::string packed = Pack(std::string("a long enough string"));
  packed.resize(packed.size() / 2);
  EXPECT_THROW(Invoke("Greet", {packed}), msgpack::unpack_error);
}

}  // namespace
}  // namespace shoal::internal
