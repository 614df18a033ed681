// The files `shoal start` and `shoal stop` keep in a session folder beside
// the ones the head and agent write (common/session.h), and how a start
// takes up the session of a head that crashed.
#ifndef SHOAL_CLI_SESSION_FILES_H_
#define SHOAL_CLI_SESSION_FILES_H_

#include <string>

namespace shoal::cli {

class Host;

// In a session folder: its cluster was stopped with `shoal stop`.
inline constexpr char kStoppedMarker[] = "stopped";
// Beside a crashed head's files while a start takes its session up.
inline constexpr char kResumingSuffix[] = ".resuming";
// A head's --storage, kept in its session folder for a head that takes the
// session up (0600: a Redis URL may hold a password).
inline constexpr char kStorageFile[] = "storage";
// Its --storage-sync, kept there likewise.
inline constexpr char kStorageSyncFile[] = "storage_sync";

// The newest session of temp_dir whose head did not stop (it crashed or
// was killed) and left its state; "" when there is none.
std::string CrashedHeadSession(const std::string& temp_dir, Host& host);

// A start that takes up a crashed session sets the files of its head aside
// (name + kResumingSuffix) while the new head starts, and puts them back if
// it fails, or is killed, before that head is up: the next start still
// finds the crashed session and takes it up, with its token, instead of
// starting a new cluster.
class SessionResume {
 public:
  // Sets the crashed head's files aside.
  explicit SessionResume(std::string dir);
  // The address the crashed head had: set aside now, or still in place if
  // an earlier start was killed after setting it aside.
  std::string Address() const;
  // The new head did not come up: the crashed session is as it was.
  void Restore();
  // The new head is up: what was set aside is no longer needed.
  void Done() { ForgetSetAside(dir_); }
  // Removes what a start set aside in `dir` (a running head's session);
  // a storage handed to its head (storage.next) becomes the session's.
  static void ForgetSetAside(const std::string& dir);

 private:
  std::string Path(const char* file) const { return dir_ + "/" + file; }
  const std::string dir_;
};

}  // namespace shoal::cli

#endif  // SHOAL_CLI_SESSION_FILES_H_
