// posenc-inspect: prints the positional encoding a HuggingFace config.json implies. For RoPE, per
// rotary pair the inverse frequency, the wavelength in tokens and whether the pair is extrapolated,
// interpolated or blended, and the cos/sin posenc uses at chosen positions; for ALiBi models (BLOOM,
// MPT, Falcon-ALiBi) the slopes; for T5 the bucket parameters. Without a config it prints ALiBi slopes,
// T5 buckets or sinusoidal rows for given parameters. `--json` prints one machine-readable object;
// `--family-table` prints README's table of the model families the config reader knows.
#include <iostream>
#include <string>
#include <vector>

#include "posenc_inspect.hpp"

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    return posenc_inspect::inspect(args, std::cout, std::cerr);
}
