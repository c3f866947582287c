#include "gnuplot_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "weir/common/text.h"

extern char** environ;

namespace weir::bench {

using weir::common::Cat;

namespace {

// Where each plot's script starts: both image terminals with enhanced text
// off, since names are shown as they are. pngcairo draws antialiased lines;
// the libgd png terminal is the fallback of builds without cairo.
constexpr std::string_view kTerminals =
    "png_terminal = (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) ? 'pngcairo' : 'png'\n"
    "set encoding utf8\n";
constexpr std::string_view kPngTerminal = "set terminal @png_terminal size 1200,700 noenhanced\n";
constexpr std::string_view kSvgTerminal =
    "set terminal svg size 1200,700 dynamic noenhanced background rgb 'white'\n";

// Each gnuplot run gets this long; gnuplot reads a file and never waits for
// input, so only a broken installation gets near it.
constexpr auto kGnuplotTimeout = std::chrono::seconds(60);

std::string LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  if (text.empty()) return "(nothing on stderr)";
  const size_t nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

}  // namespace

std::string Num(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

absl::Status GnuplotWriter::Plot(const std::string& name, const std::string& data,
                                 const std::string& settings, const std::string& plot) {
  if (absl::Status s = WriteFile(name + ".dat", data); !s.ok()) return s;
  std::string script =
      Cat("# ", program_, ": ", name, ". To redraw, run gnuplot ", name, ".gp in this directory.\n");
  script += kTerminals;
  script += settings;
  script += kPngTerminal;
  script += Cat("set output '", name, ".png'\nplot ", plot, "\n");
  script += kSvgTerminal;
  script += Cat("set output '", name, ".svg'\nplot ", plot, "\nunset output\n");
  if (absl::Status s = WriteFile(name + ".gp", script); !s.ok()) return s;
  if (absl::Status s = RunGnuplot(name); !s.ok()) return s;
  for (const char* ext : {".png", ".svg"}) {
    const std::string path = Path(name + ext);
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) == 0 || ec) {
      return absl::InternalError(Cat("plot ", name, ": gnuplot exited with status 0 but wrote no ", path));
    }
    if (files_ != nullptr) files_->push_back(path);
  }
  return absl::OkStatus();
}

std::string GnuplotWriter::Path(const std::string& file) const { return Cat(dir_, "/", file); }

absl::Status GnuplotWriter::WriteFile(const std::string& file, const std::string& text) {
  const std::string path = Path(file);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (out) out.close();
  if (!out) return absl::FailedPreconditionError(Cat("cannot write ", path, ": ", std::strerror(errno)));
  if (files_ != nullptr) files_->push_back(path);
  return absl::OkStatus();
}

// Runs `gnuplot NAME.gp` in the plot directory (so the script names only
// files of its own, whatever characters the directory's path holds), with
// stdin and stdout on /dev/null and stderr kept for the error message.
absl::Status GnuplotWriter::RunGnuplot(const std::string& name) {
  const std::string script = name + ".gp";
  std::string program = gnuplot_;
  // The child changes directory before exec: a relative path with a '/'
  // must be made absolute first (a bare name is looked up in PATH).
  if (program.find('/') != std::string::npos && program.front() != '/') {
    program = std::filesystem::absolute(program).string();
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(Cat("plot ", name, ": pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir_.c_str());
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  // The caller may block signals it waits for (SIGINT, SIGTERM); gnuplot
  // starts with none blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  char* argv[] = {program.data(), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = -1;
  const int spawn_error = posix_spawnp(&pid, program.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(err_pipe[1]);
  if (spawn_error != 0) {
    close(err_pipe[0]);
    const std::string hint = spawn_error == ENOENT ? " (is gnuplot installed? Debian: gnuplot-nox)" : "";
    return absl::FailedPreconditionError(
        Cat("plot ", name, ": cannot run ", gnuplot_, ": ", std::strerror(spawn_error), hint));
  }

  // Read stderr until gnuplot closes it, keeping the tail for the message.
  std::string err_text;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + kGnuplotTimeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{err_pipe[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;  // the deadline check ends it
    if (ready < 0) break;
    char buf[4096];
    const ssize_t n = read(err_pipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    err_text.append(buf, static_cast<size_t>(n));
    if (err_text.size() > 16384) err_text.erase(0, err_text.size() - 8192);
  }
  close(err_pipe[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        Cat("plot ", name, ": gnuplot did not finish within ", kGnuplotTimeout.count(), " s and was killed"));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  const std::string how = WIFEXITED(status) ? Cat("exited with status ", WEXITSTATUS(status))
                                            : Cat("was killed by signal ", WTERMSIG(status));
  return absl::InternalError(Cat("plot ", name, ": gnuplot ", how, ": ", LastLine(err_text)));
}

}  // namespace weir::bench
