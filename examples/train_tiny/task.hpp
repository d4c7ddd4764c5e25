#pragma once
// The synthetic task: associative recall at a random depth. A sequence of n tokens is random filler
// with `pairs` key-value pairs (key token, then its value token) placed at random depths, then the same
// keys asked again in a random order at the end (key, value). Values are drawn from the filler's
// tokens, so a value is told apart from filler only by where it stands (right after its key): no
// bag-of-tokens shortcut finds it. The model must predict each queried
// key's value: the answer positions are the value slots of the queries. The rule is the same at every
// length (the same number of pairs, more filler), so a model that fails at 8L fails because of how its
// attention treats distance, not because the task changed.
//
// Finding the value needs position: the value is the token right after the earlier copy of the key
// (an induction head: one layer marks each token with its predecessor, the next matches the query).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace train_tiny {

struct recall_task {
    std::size_t filler_tokens = 16;  ///< token ids [0, filler): filler and values
    std::size_t key_tokens = 4;      ///< ids [filler, filler + keys)
    std::size_t pairs = 4;           ///< ≤ key_tokens (distinct keys per sequence)

    [[nodiscard]] std::size_t vocab() const { return filler_tokens + key_tokens; }
    [[nodiscard]] std::size_t min_length() const { return 4 * pairs + 2; }
};

/// A batch of sequences, row-major [batch × length]; targets[i] is the answer at answer_rows[i] (an
/// index into the flattened batch): the model's prediction at that row must equal it.
struct recall_batch {
    std::size_t batch = 0, length = 0;
    std::vector<int> tokens;
    std::vector<std::size_t> answer_rows;
    std::vector<int> targets;
};

inline recall_batch make_recall_batch(const recall_task& task, std::size_t batch, std::size_t length, std::mt19937_64& rng) {
    if (length < task.min_length()) throw std::invalid_argument("recall task: length too short for its pairs");
    recall_batch out{batch, length, std::vector<int>(batch * length), {}, {}};
    const std::size_t body = length - 2 * task.pairs;  // the queries fill the last 2·pairs slots
    auto uniform = [&rng](std::size_t n) { return static_cast<std::size_t>(std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)); };
    for (std::size_t b = 0; b < batch; ++b) {
        int* seq = out.tokens.data() + b * length;
        for (std::size_t t = 0; t < body; ++t) seq[t] = static_cast<int>(uniform(task.filler_tokens));
        // Distinct keys; the pairs at distinct, non-overlapping depths (slot s covers tokens 2s, 2s+1).
        std::vector<int> keys(task.key_tokens), values(task.pairs);
        for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int>(task.filler_tokens + i);
        std::shuffle(keys.begin(), keys.end(), rng);
        keys.resize(task.pairs);
        std::vector<std::size_t> slots(body / 2);
        for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = i;
        std::shuffle(slots.begin(), slots.end(), rng);
        for (std::size_t p = 0; p < task.pairs; ++p) {
            values[p] = static_cast<int>(uniform(task.filler_tokens));
            seq[2 * slots[p]] = keys[p];
            seq[2 * slots[p] + 1] = values[p];
        }
        std::vector<std::size_t> order(task.pairs);
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (std::size_t i = 0; i < task.pairs; ++i) {
            const std::size_t t = body + 2 * i;
            seq[t] = keys[order[i]];
            seq[t + 1] = values[order[i]];
            out.answer_rows.push_back(b * length + t);  // the prediction made at the query key
            out.targets.push_back(values[order[i]]);
        }
    }
    return out;
}

}  // namespace train_tiny
