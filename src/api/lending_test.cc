// Refs lent inside results, over real sockets on one loop: an owner
// (OwnedObjects + LentObjects) and a borrower (OwnedObjects +
// BorrowedObjects), as two processes' runtimes hold them.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "api/borrowed_objects.h"
#include "api/lent_objects.h"
#include "api/loop_testing.h"
#include "api/owned_objects.h"
#include "api/task_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "lending-test-token";

class LendingTest : public LoopTest {
 protected:
  void SetUp() override {
    StartLoop("lending-test");
    Run([&] {
      lent_ = std::make_unique<LentObjects>(
          loop_.get(), &owner_,
          LentObjects::Options{
              .host = "127.0.0.1",
              .token = kToken,
              .cancel =
                  [this](const std::string& id, bool force, bool recursive) {
                    cancels_.push_back(id + (force ? " force" : "") +
                                       (recursive ? " recursive" : ""));
                    return absl::StatusOr<bool>(true);
                  },
              .lending = [this](bool on) { lending_.push_back(on); },
          });
      channels_ = std::make_unique<rpc::TcpChannelFactory>(loop_.get(), kToken,
                                                           "borrower");
      borrowed_ = std::make_unique<BorrowedObjects>(
          &borrower_, channels_.get(),
          [this](const std::string& id) { settled_.push_back(id); });
    });
  }

  void TearDown() override {
    std::vector<std::shared_ptr<RefHandle>> held;
    Run([&] {
      borrowed_->Stop();
      held = lent_->Stop();
      borrowed_.reset();
      channels_.reset();
      lent_.reset();
    });
    held.clear();
    loop_->Stop();
  }

  // The owner lends `id` (held by `handle`); returns the ref a result
  // carries.
  proto::BorrowedRef Lend(const std::shared_ptr<RefHandle>& handle) {
    proto::BorrowedRef ref;
    Run([&] {
      absl::StatusOr<std::string> address = lent_->Export(handle);
      ASSERT_TRUE(address.ok()) << address.status();
      ref.set_object_id(handle->id());
      ref.set_owner_address(*address);
    });
    return ref;
  }

  std::shared_ptr<RefHandle> Borrow(const proto::BorrowedRef& ref,
                                    int exports_taken) {
    std::shared_ptr<RefHandle> handle;
    Run([&] { handle = borrowed_->Borrow(ref, exports_taken); });
    return handle;
  }

  OwnedObjects::State BorrowerState(const std::string& id,
                                    OwnedObjects::Ready* ready = nullptr,
                                    absl::Status* error = nullptr) {
    return borrower_.Peek(id, ready, error);
  }

  size_t Lent() {
    size_t n = 0;
    Run([&] { n = lent_->lent(); });
    return n;
  }

  // What each table's runtime does when an object is forgotten.
  OwnedObjects owner_{
      [](const std::string&, bool, std::set<std::string>, bool) {}};
  OwnedObjects borrower_{[this](const std::string& id, bool,
                                std::set<std::string> nodes, bool borrowed) {
    ASSERT_TRUE(borrowed);
    loop_->Post([this, id, nodes] { borrowed_->Forgotten(id, nodes); });
  }};
  std::unique_ptr<LentObjects> lent_;
  std::unique_ptr<rpc::TcpChannelFactory> channels_;
  std::unique_ptr<BorrowedObjects> borrowed_;
  std::vector<std::string> cancels_;
  std::vector<bool> lending_;
  std::vector<std::string> settled_;
};

TEST_F(LendingTest, APendingObjectReachesItsBorrowerWhenItIsMade) {
  owner_.AddPending("r1");
  auto owned = owner_.NewHandle("r1");
  proto::BorrowedRef ref = Lend(owned);
  auto handle = Borrow(ref, 1);
  ASSERT_NE(handle, nullptr);
  EXPECT_TRUE(borrower_.IsBorrowed("r1"));
  EXPECT_EQ(BorrowerState("r1"), OwnedObjects::State::kPending);

  Run([&] {
    proto::TaskResult result;
    result.set_value("the value");
    owner_.Complete("r1", &result);
    lent_->Settled("r1");
  });
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  OwnedObjects::Ready ready;
  ASSERT_EQ(BorrowerState("r1", &ready), OwnedObjects::State::kReady);
  EXPECT_EQ(*ready.value, "the value");
  EXPECT_EQ(settled_, std::vector<std::string>{"r1"});
  EXPECT_EQ(lending_, std::vector<bool>{true});
}

TEST_F(LendingTest, AStoredObjectReadsBackAsWhereItIsStored) {
  proto::StoredObject stored;
  stored.set_object_id("big");
  stored.set_data_size(1 << 20);
  stored.add_sources()->set_node_id("n1");
  owner_.AddStored("big", stored);
  auto handle = Borrow(Lend(owner_.NewHandle("big")), 1);
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  OwnedObjects::Ready ready;
  ASSERT_EQ(BorrowerState("big", &ready), OwnedObjects::State::kReady);
  EXPECT_TRUE(ready.stored);
  EXPECT_EQ(ready.stored_object.data_size(), 1u << 20);
  EXPECT_EQ(ready.stored_object.sources(0).node_id(), "n1");
}

TEST_F(LendingTest, AFailedObjectKeepsItsKindAndMessage) {
  owner_.AddPending("bad");
  auto owned = owner_.NewHandle("bad");
  auto handle = Borrow(Lend(owned), 1);
  Run([&] {
    owner_.Fail("bad", RemoteFailure("f", "n1", "ZeroDivisionError: no",
                                     "pickled exception"));
    lent_->Settled("bad");
  });
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  absl::Status error;
  ASSERT_EQ(BorrowerState("bad", nullptr, &error),
            OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kRemote);
  absl::Status original =
      RemoteFailure("f", "n1", "ZeroDivisionError: no", "pickled exception");
  EXPECT_EQ(error, original);
}

TEST_F(LendingTest, TheOwnerKeepsTheObjectUntilItsBorrowerReleasesIt) {
  owner_.AddValue("r", std::make_shared<std::string>("v"));
  proto::BorrowedRef ref = Lend(owner_.NewHandle("r"));
  EXPECT_EQ(Lent(), 1u);
  auto handle = Borrow(ref, 1);
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  EXPECT_EQ(Lent(), 1u);  // borrowed now, its export taken
  // A second read of the same result (the borrower holds it already):
  // only its export is handed back.
  proto::BorrowedRef again = Lend(owner_.NewHandle("r"));
  EXPECT_EQ(Borrow(again, 1), handle);
  borrower_.Release("r");
  ASSERT_TRUE(Eventually([&] { return lent_->lent() == 0; }));
  EXPECT_EQ(lending_, (std::vector<bool>{true, false}));
}

TEST_F(LendingTest, AnExportNobodyTookKeepsTheObject) {
  owner_.AddValue("r", std::make_shared<std::string>("v"));
  proto::BorrowedRef ref = Lend(owner_.NewHandle("r"));
  // A borrower that reads it without taking the export (a third process
  // that found the ref inside a value), then releases it.
  Borrow(ref, 0);
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  borrower_.Release("r");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Lent(), 1u);
}

TEST_F(LendingTest, ABorrowerThatGoesAwayEndsItsBorrow) {
  owner_.AddValue("r", std::make_shared<std::string>("v"));
  auto handle = Borrow(Lend(owner_.NewHandle("r")), 1);
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  Run([&] { borrowed_->Stop(); });  // its connections close
  EXPECT_TRUE(Eventually([&] { return lent_->lent() == 0; }));
}

TEST_F(LendingTest, AnObjectItsOwnerNoLongerHoldsIsLost) {
  proto::BorrowedRef ref;
  ref.set_object_id("gone");
  Run([&] {
    owner_.AddValue("x", std::make_shared<std::string>("v"));
    ref.set_owner_address(*lent_->Export(owner_.NewHandle("x")));
  });
  auto handle = Borrow(ref, 0);
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  absl::Status error;
  ASSERT_EQ(BorrowerState("gone", nullptr, &error),
            OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kObjectLost);
  EXPECT_THAT(error.message(), HasSubstr("holds no object gone"));
}

TEST_F(LendingTest, AnOwnerThatEndsLosesWhatItLent) {
  owner_.AddPending("r");
  auto handle = Borrow(Lend(owner_.NewHandle("r")), 1);
  std::vector<std::shared_ptr<RefHandle>> held;
  Run([&] { held = lent_->Stop(); });  // its listener closes
  ASSERT_TRUE(Eventually([&] { return !settled_.empty(); }));
  absl::Status error;
  ASSERT_EQ(BorrowerState("r", nullptr, &error), OwnedObjects::State::kFailed);
  EXPECT_EQ(KindOf(error), ErrorKind::kObjectLost);
  EXPECT_THAT(error.message(), HasSubstr("cannot be reached"));
}

TEST_F(LendingTest, CancelGoesToTheOwner) {
  owner_.AddPending("r");
  auto handle = Borrow(Lend(owner_.NewHandle("r")), 1);
  absl::StatusOr<bool> cancelled = false;
  cancelled = rpc::RunOnLoopAndWait<absl::StatusOr<bool>>(
      loop_.get(), [&](rpc::LoopDone<absl::StatusOr<bool>>::Type done) {
        borrowed_->Cancel("r", /*force=*/true, /*recursive=*/true,
                          std::move(done));
      });
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_TRUE(*cancelled);
  Run([&] {
    EXPECT_EQ(cancels_, std::vector<std::string>{"r force recursive"});
  });
}

TEST_F(LendingTest, ABorrowerPassesItsRefOnThroughTheOwner) {
  owner_.AddPending("r");
  auto handle = Borrow(Lend(owner_.NewHandle("r")), 1);
  absl::StatusOr<std::string> owner =
      rpc::RunOnLoopAndWait<absl::StatusOr<std::string>>(
          loop_.get(),
          [&](rpc::LoopDone<absl::StatusOr<std::string>>::Type done) {
            borrowed_->Export("r", std::move(done));
          });
  ASSERT_TRUE(owner.ok()) << owner.status();
  std::string address;
  Run([&] { address = lent_->address(); });
  EXPECT_EQ(*owner, address);
  // The borrower releases its own borrow: the new export keeps it.
  borrower_.Release("r");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Lent(), 1u);
}

}  // namespace
}  // namespace shoal::internal
