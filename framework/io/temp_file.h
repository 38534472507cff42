// temp_file.h: the temporary file behind every atomic save (write "<path>.tmp-<pid>-<n>",
// fsync, rename over <path>), so a reader never sees half a checkpoint at <path>.
// What a save can leave behind is handled here too: a save stopped by SIGTERM, SIGINT or
// SIGHUP removes its temporary before the signal takes its usual course (handlers are in
// place only while a save is under way), and each new save
// removes the temporaries of that same path left by processes that no longer exist
// (killed by SIGKILL, which nothing can catch).
// Read next: safetensors.cpp, its one user.
#pragma once
#include <string>

namespace dplab {

class TempFile {
 public:
  // Creates "<final_path>.tmp-<pid>-<n>" (O_EXCL) after removing stale temporaries of
  // final_path whose pid is dead.
  explicit TempFile(const std::string& final_path);
  ~TempFile();  // closes and unlinks it unless commit() renamed it
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // fsync, close, rename over the final path, fsync the directory: from here on the final
  // path holds the complete new file.
  void commit();

 private:
  std::string final_, path_;
  int fd_ = -1;
  int slot_ = -1;  // where the signal handlers find path_
  bool committed_ = false;
};

// Removes "<final_path>.tmp-<pid>-<n>" files whose process is gone; returns how many.
int remove_stale_temporaries(const std::string& final_path);

}  // namespace dplab
