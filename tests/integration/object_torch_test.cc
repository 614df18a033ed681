// libtorch tensors through the object store on a real cluster: the tensor
// Get returns lies in the node's shared memory, keeps its object alive, and
// a remote function views its bytes as a tensor too.
#include "shoal/object_torch.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/store_mapping.h"

namespace {

using ::testing::HasSubstr;

double SumAsMatrix(shoal::Buffer bytes, int64_t rows, int64_t cols) {
  return shoal::AsTensor(bytes, torch::kFloat32, {rows, cols})
      .sum()
      .item<double>();
}
SHOAL_REMOTE(SumAsMatrix);

class ObjectTorchTest : public shoal::testing::TwoCpuHostsTest {
 protected:
  void SetUp() override {
    TwoCpuHostsTest::SetUp();
    cluster_->Connect();
  }
  void TearDown() override {
    shoal::Shutdown();
    TwoCpuHostsTest::TearDown();
  }
};

TEST_F(ObjectTorchTest, TensorsRoundTripWithoutACopyOnGet) {
  torch::manual_seed(0);
  torch::Tensor weights = torch::randn({512, 256});
  shoal::TensorRef ref = shoal::PutTensor(weights);
  torch::Tensor got = shoal::GetTensor(ref);
  EXPECT_TRUE(torch::equal(got, weights));
  EXPECT_EQ(got.sizes(), weights.sizes());
  EXPECT_TRUE(shoal::testing::InStoreMapping(got.data_ptr(), got.nbytes()));

  // A strided view is made contiguous; other dtypes keep their type.
  torch::Tensor transposed = weights.t();
  EXPECT_TRUE(
      torch::equal(shoal::GetTensor(shoal::PutTensor(transposed)), transposed));
  torch::Tensor ints = torch::arange(100000, torch::kInt64);
  torch::Tensor ints_back = shoal::GetTensor(shoal::PutTensor(ints));
  EXPECT_EQ(ints_back.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(ints_back, ints));

  // The tensor outlives its ref: its storage keeps the object.
  ref = {};
  EXPECT_TRUE(torch::equal(got, weights));

  // A remote function views the bytes as a tensor where it runs.
  shoal::TensorRef again = shoal::PutTensor(weights);
  double sum = shoal::Get(
      shoal::Task(SumAsMatrix).Remote(again.data, int64_t{512}, int64_t{256}));
  EXPECT_NEAR(sum, weights.sum().item<double>(), 1e-2);
  EXPECT_THAT(
      [&] {
        shoal::AsTensor(shoal::Get(again.data), torch::kFloat32, {7, 7});
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("49")));
}

}  // namespace
