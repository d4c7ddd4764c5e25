#pragma once
// Runs the posenc-inspect built with the tests (POSENC_INSPECT_PATH) through the shell and keeps what
// it wrote to stdout and stderr. Empty where the build has no posenc-inspect.
#ifdef POSENC_INSPECT_PATH
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include <stdlib.h>    // mkstemp
#include <sys/wait.h>  // WIFEXITED
#include <unistd.h>    // close

namespace posenc_test {

struct inspect_result {
    int exit_code = -1;  // -1: it did not exit normally (a signal)
    std::string out, err;
};

/// `args` go to the shell as written (quote paths with spaces yourself).
inline inspect_result run_inspect(const std::string& args) {
    // One file a call: ctest runs tests in parallel.
    std::string err_path = (std::filesystem::temp_directory_path() / "posenc_inspect_stderr_XXXXXX").string();
    const int fd = mkstemp(err_path.data());
    if (fd < 0) throw std::runtime_error("run_inspect: mkstemp failed in " + err_path);
    close(fd);
    const std::string cmd = std::string(POSENC_INSPECT_PATH) + " " + args + " 2>'" + err_path + "'";
    inspect_result r;
    if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
        const int status = pclose(p);
        if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    } else {
        std::remove(err_path.c_str());
        throw std::runtime_error("run_inspect: popen failed: " + cmd);
    }
    std::ifstream e(err_path, std::ios::binary);
    r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
    e.close();
    std::remove(err_path.c_str());
    return r;
}

}  // namespace posenc_test
#endif
