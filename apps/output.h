#pragma once
// Everything the CLI prints to standard output goes through here, so that a failed write
// (a full disk, a closed pipe, /dev/full) is an error and a non-zero exit, never a
// silently truncated result. Files it writes (--trace, bench results) are opened before
// the work starts, so a bad path fails at once, and replaced atomically when done.
#include <string>
#include <string_view>

#include "core/unique_fd.h"

namespace flashspec {

// Writes s to stdout; Error "standard output: ..." when the stream has failed.
void write_stdout(std::string_view s);
// Flushes stdout (text meant to be seen now, e.g. a streamed token); Error on failure.
void flush_stdout();
// write_stdout(s), then flush_stdout() (nothing for ""): a streamed piece, or a whole
// result whose failed write must be reported before the process exits.
void print_stdout(std::string_view s);

// A file written whole or not at all. Its bytes go to a file without a name (O_TMPFILE)
// in the destination's folder, which commit() links in under a temporary name and
// renames over the destination: a run that ends any other way -- an error, Ctrl-C,
// SIGTERM, a crash, the OOM killer -- leaves nothing behind, with no cleanup to run.
// Filesystems without O_TMPFILE get a named temporary file (PATH.tmp-XXXXXX), removed on
// every error; only a killed process can leave that one.
class OutputFile {
 public:
  // Creates the temporary file beside `path` now: Error (naming the path) when the folder
  // does not exist or is not writable. `path` "-" is standard output.
  explicit OutputFile(std::string path);
  ~OutputFile();  // a file never committed is gone
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `data`; Error on any failure.
  void write(std::string_view data);
  // Puts the file written so far in place of `path`; Error on any failure.
  void commit();
  // write(data), then commit().
  void write_all(std::string_view data) {
    write(data);
    commit();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;  // tmp_: the named temporary file, empty when unnamed or in place
  UniqueFd fd_;
  bool unnamed_ = false;    // fd_ is an O_TMPFILE file
};

}  // namespace flashspec
