#pragma once
// posenc-inspect's logic as a function (tools/posenc-inspect.cpp is its main; tests/fuzz/ drives it
// directly): the command line (inspect_args.hpp) and the reports (inspect_report.hpp). inspect()
// never exits and never writes partial output: the whole report is built in memory and written to
// `out` only when it is complete; an error writes one line to `err`.
#include <exception>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <posenc/core/errors.hpp>

#include "inspect_args.hpp"
#include "inspect_report.hpp"

namespace posenc_inspect {

/// posenc-inspect with `args` (without the program name): 0 with the report on `out`, or 1 with
/// exactly one line on `err` and nothing on `out`.
inline int inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    std::string message;
    try {
        bool help = false;
        const options o = parse_args(args, help);
        std::ostringstream report;
        if (help) {
            report << usage;
        } else {
            run(report, o);
        }
        out << report.str();
        return 0;
    } catch (const std::exception& e) {
        message = e.what();
    } catch (...) {
        message = "unknown error";
    }
    err << "posenc-inspect: " << posenc::detail::one_line(message, 1000) << '\n';
    return 1;
}

}  // namespace posenc_inspect
