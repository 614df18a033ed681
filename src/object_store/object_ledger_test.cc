#include "object_store/object_ledger.h"

#include <string>

#include "gtest/gtest.h"

namespace shoal::object_store {
namespace {

TEST(ObjectLedgerTest, CountsBytesAndObjectsByCategory) {
  ObjectLedger ledger;
  ObjectLedger::Record a, b, c;
  ledger.Add("a", ObjectLedger::kCreating, 64, true, true, &a);
  ledger.Add("b", ObjectLedger::kPinned, 128, true, true, &b);
  ledger.Add("c", ObjectLedger::kPinned, 192, false, true, &c);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kCreating), 64u);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kPinned), 320u);
  EXPECT_EQ(ledger.count(ObjectLedger::kPinned), 2u);
  EXPECT_EQ(ledger.OldestPrimary(), nullptr) << "pinned objects are kept";
  EXPECT_EQ(ledger.OldestSecondary(), nullptr);

  // b is released: it moves from pinned to evictable.
  ledger.Remove(&b);
  ledger.Add("b", ObjectLedger::kEvictable, 128, true, true, &b);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kPinned), 192u);
  EXPECT_EQ(ledger.count(ObjectLedger::kPinned), 1u);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kEvictable), 128u);
  EXPECT_EQ(ledger.evictable_primary_bytes(), 128u);
  ASSERT_NE(ledger.OldestPrimary(), nullptr);
  EXPECT_EQ(*ledger.OldestPrimary(), "b");
}

TEST(ObjectLedgerTest, GivesUpTheLeastRecentlyUsedOfEachKindFirst) {
  ObjectLedger ledger;
  ObjectLedger::Record p1, p2, s1, s2;
  ledger.Add("p1", ObjectLedger::kEvictable, 64, true, true, &p1);
  ledger.Add("s1", ObjectLedger::kEvictable, 64, false, true, &s1);
  ledger.Add("p2", ObjectLedger::kEvictable, 64, true, true, &p2);
  ledger.Add("s2", ObjectLedger::kEvictable, 64, false, true, &s2);
  EXPECT_EQ(*ledger.OldestPrimary(), "p1");
  EXPECT_EQ(*ledger.OldestSecondary(), "s1");
  EXPECT_EQ(ledger.evictable_primary_bytes(), 128u)
      << "secondary copies are not counted as spillable";

  // s1 is read (pinned, then released): it goes to the back.
  ledger.Remove(&s1);
  ledger.Add("s1", ObjectLedger::kPinned, 64, false, true, &s1);
  ledger.Remove(&s1);
  ledger.Add("s1", ObjectLedger::kEvictable, 64, false, true, &s1);
  EXPECT_EQ(*ledger.OldestSecondary(), "s2");

  ledger.Remove(&p1);
  EXPECT_EQ(*ledger.OldestPrimary(), "p2");
  EXPECT_EQ(ledger.evictable_primary_bytes(), 64u);
  ledger.Remove(&p2);
  EXPECT_EQ(ledger.OldestPrimary(), nullptr);
  EXPECT_EQ(ledger.count(ObjectLedger::kEvictable), 2u);
}

TEST(ObjectLedgerTest, AnObjectAboutToBeFreedIsNeverQueued) {
  ObjectLedger ledger;
  ObjectLedger::Record r;
  ledger.Add("gone", ObjectLedger::kEvictable, 64, true, /*queue=*/false, &r);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kEvictable), 64u);
  EXPECT_EQ(ledger.OldestPrimary(), nullptr);
  EXPECT_EQ(ledger.evictable_primary_bytes(), 0u);
  ledger.Remove(&r);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kEvictable), 0u);
  EXPECT_EQ(ledger.count(ObjectLedger::kEvictable), 0u);
}

TEST(ObjectLedgerTest, SpilledObjectsAreCountedButNotQueued) {
  ObjectLedger ledger;
  ObjectLedger::Record r;
  ledger.Add("x", ObjectLedger::kSpilledOut, 1000, true, true, &r);
  EXPECT_EQ(ledger.bytes(ObjectLedger::kSpilledOut), 1000u);
  EXPECT_EQ(ledger.OldestPrimary(), nullptr);
}

}  // namespace
}  // namespace shoal::object_store
