#pragma once
// Causal-LM batches from token files: GPT windows, a resumable sampler, validation passes.
//
// Windows (GPT data, docs/design/data.md). With T = seq_len and stride S (default T), window k holds the
// T + 1 tokens starting at k·S; its inputs are ids[0:T] and its targets ids[1:T+1]. After the last
// full window, a *tail* window (fewer than T + 1 tokens, starting at the next multiple of S) is
// kept when it has at least T/2 targets (2·(len − 1) ≥ T) and keep_tail is on; its missing
// positions get input pad_id and target lm_ignore_index. A stream shorter than one full window is
// an error. In a file of fixed-length sequences (token file sequence_length L > 0, WikiText mode)
// windows are laid out inside each sequence and never cross into the next one; seq_len = L − 1
// gives one window per sequence.
//
// Sampler. Each epoch visits every window once, in file order (`sequential`) or in a seeded
// pseudo-random order (`shuffled`: a Feistel permutation keyed by counter_rng(seed) and the epoch,
// computed per index, so it needs no memory and no state). A batch takes the next B windows and
// runs on into the next epoch when one ends, so every training batch is full. The whole state is
// (epoch, position): save state(), later restore() it on a sampler built with the same options
// over the same file, and the batches continue exactly.
//
//   sparselm::data::token_file train("train.tok");
//   sparselm::data::lm_sampler s(train, {.batch_size = 8, .windows = {.seq_len = 256}, .seed = 1});
//   sparselm::data::lm_batch b;
//   s.next(b);                      // b.inputs, b.targets: (B, T) int32
//   auto st = s.state();            // save with the checkpoint; s.restore(st) resumes

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/data/token_file.hpp"

namespace sparselm::data {

// Target value at padded positions; the LM head's ignore index (layers/lm_head.hpp) is the same.
inline constexpr std::int32_t lm_ignore_index = -100;

struct lm_window_options {
  std::size_t seq_len = 0;  // T: input positions per window (a window holds T + 1 tokens)
  std::size_t stride = 0;   // tokens between window starts; 0 means T
  bool keep_tail = true;    // keep a final short window with at least T/2 targets
};

// Window arithmetic over a stream of n tokens, or over n/L sequences of L tokens each.
class lm_windows {
 public:
  lm_windows() = default;
  // `what` names the data in error messages (usually the token file's path).
  lm_windows(std::uint64_t n_tokens, std::uint64_t sequence_length, lm_window_options o, const std::string& what)
      : opt_(o) {
    SPARSELM_CHECK(o.seq_len > 0, what, ": seq_len must be > 0");
    if (opt_.stride == 0) opt_.stride = o.seq_len;
    seg_len_ = sequence_length == 0 ? n_tokens : sequence_length;
    SPARSELM_CHECK(seg_len_ > 0 && n_tokens % seg_len_ == 0, what, ": ", n_tokens,
                   " tokens are not a whole number of ", seg_len_, "-token sequences");
    segments_ = n_tokens / seg_len_;
    const std::uint64_t win = o.seq_len + 1;
    SPARSELM_CHECK(seg_len_ >= win, what, ": ",
                   sequence_length == 0 ? std::string("the token stream has ") + std::to_string(n_tokens) + " tokens"
                                        : std::to_string(seg_len_) + "-token sequences are",
                   ", shorter than one window of seq_len + 1 = ", win, " tokens");
    full_ = (seg_len_ - win) / opt_.stride + 1;
    const std::uint64_t tail_start = full_ * opt_.stride;
    tail_ = false;
    if (opt_.keep_tail && tail_start < seg_len_) {
      const std::uint64_t len = seg_len_ - tail_start;  // < win
      tail_ = 2 * (len - 1) >= o.seq_len && len >= 2;
    }
    per_segment_ = full_ + (tail_ ? 1 : 0);
  }

  std::uint64_t count() const noexcept { return segments_ * per_segment_; }
  std::size_t seq_len() const noexcept { return opt_.seq_len; }
  std::size_t stride() const noexcept { return opt_.stride; }
  std::uint64_t windows_per_sequence() const noexcept { return per_segment_; }
  bool has_tail() const noexcept { return tail_; }
  // First token of window w (< count()).
  std::uint64_t start(std::uint64_t w) const noexcept {
    return (w / per_segment_) * seg_len_ + (w % per_segment_) * opt_.stride;
  }
  // Tokens in window w: seq_len + 1, or fewer for a tail window.
  std::size_t length(std::uint64_t w) const noexcept {
    const std::uint64_t k = w % per_segment_;
    const std::uint64_t off = k * opt_.stride;
    return std::size_t(std::min<std::uint64_t>(opt_.seq_len + 1, seg_len_ - off));
  }

 private:
  lm_window_options opt_{};
  std::uint64_t seg_len_ = 0, segments_ = 0, full_ = 0, per_segment_ = 0;
  bool tail_ = false;
};

// A keyed bijection of [0, n): a balanced Feistel network on the smallest even-bit power-of-two
// domain >= n, with counter_rng rounds, and cycle walking back into [0, n).
class index_permutation {
 public:
  index_permutation() = default;
  index_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t stream) : n_(n), rng_(seed), stream_(stream) {
    SPARSELM_CHECK(n > 0, "index_permutation: empty domain");
    int bits = n <= 1 ? 1 : int(std::bit_width(n - 1));
    half_ = (bits + 1) / 2;
    mask_ = (std::uint64_t(1) << half_) - 1;
  }
  std::uint64_t size() const noexcept { return n_; }
  std::uint64_t operator()(std::uint64_t i) const noexcept {
    std::uint64_t x = i;
    do x = feistel(x);
    while (x >= n_);
    return x;
  }

 private:
  static constexpr int rounds = 6;
  std::uint64_t feistel(std::uint64_t x) const noexcept {
    std::uint64_t l = x >> half_, r = x & mask_;
    for (int k = 0; k < rounds; ++k) {
      std::uint64_t f = rng_.bits(mix_stream(stream_, std::uint64_t(k)), r) & mask_;
      std::uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    return (l << half_) | r;
  }
  std::uint64_t n_ = 1;
  counter_rng rng_{};
  std::uint64_t stream_ = 0;
  int half_ = 1;
  std::uint64_t mask_ = 1;
};

// One batch: B rows of T positions, row-major.
struct lm_batch {
  std::size_t batch_size = 0;           // B
  std::size_t seq_len = 0;              // T
  std::size_t rows = 0;                 // rows filled: B, or fewer in the last validation batch
  std::vector<std::int32_t> inputs;     // (rows, T)
  std::vector<std::int32_t> targets;    // (rows, T); lm_ignore_index at padding
  std::vector<std::uint64_t> windows;   // (rows) window index of each row
  // Number of targets that are not padding.
  std::size_t target_count() const noexcept {
    return std::size_t(std::count_if(targets.begin(), targets.end(), [](std::int32_t t) { return t != lm_ignore_index; }));
  }
};

enum class lm_order { sequential, shuffled };

struct lm_sampler_options {
  std::size_t batch_size = 1;        // B
  lm_window_options windows{};       // seq_len, stride, keep_tail
  lm_order order = lm_order::shuffled;
  std::uint64_t seed = 0;            // shuffling key
  std::int32_t pad_id = 0;           // input id at padded positions of a tail window
};

// Where a sampler is: `position` windows of epoch `epoch` have been handed out. `seed` and
// `windows` identify the order, so restoring into a sampler over other data fails loudly.
struct lm_sampler_state {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  std::uint64_t seed = 0;
  std::uint64_t windows = 0;
  bool operator==(const lm_sampler_state&) const = default;
};
inline void to_json(nlohmann::json& j, const lm_sampler_state& s) {
  j = {{"epoch", s.epoch}, {"position", s.position}, {"seed", s.seed}, {"windows", s.windows}};
}
inline void from_json(const nlohmann::json& j, lm_sampler_state& s) {
  for (const char* k : {"epoch", "position", "seed", "windows"})
    SPARSELM_CHECK(j.contains(k) && j.at(k).is_number_unsigned(), "lm_sampler_state: field \"", k,
                   "\" missing or not an unsigned integer");
  s.epoch = j.at("epoch").get<std::uint64_t>();
  s.position = j.at("position").get<std::uint64_t>();
  s.seed = j.at("seed").get<std::uint64_t>();
  s.windows = j.at("windows").get<std::uint64_t>();
}

namespace detail {
inline void fill_row(const token_file& f, const lm_windows& w, std::uint64_t win, std::int32_t pad_id, std::size_t row,
                     lm_batch& b) {
  const std::size_t T = b.seq_len;
  const std::size_t len = w.length(win);
  std::int32_t* in = b.inputs.data() + row * T;
  std::int32_t* tg = b.targets.data() + row * T;
  // Read the window's tokens into the target row shifted by one, then derive the inputs.
  thread_local std::vector<std::int32_t> tmp;
  tmp.resize(len);
  f.read(w.start(win), tmp);
  for (std::size_t t = 0; t + 1 < len; ++t) {
    in[t] = tmp[t];
    tg[t] = tmp[t + 1];
  }
  for (std::size_t t = len - 1; t < T; ++t) {
    in[t] = pad_id;
    tg[t] = lm_ignore_index;
  }
  b.windows[row] = win;
}
inline void shape_batch(lm_batch& b, std::size_t B, std::size_t T, std::size_t rows) {
  b.batch_size = B;
  b.seq_len = T;
  b.rows = rows;
  b.inputs.resize(rows * T);
  b.targets.resize(rows * T);
  b.windows.resize(rows);
}
}  // namespace detail

// Training sampler over one token file (which must outlive it).
class lm_sampler {
 public:
  lm_sampler(const token_file& file, lm_sampler_options o)
      : file_(&file), opt_(o), win_(file.size(), file.sequence_length(), o.windows, file.path().string()) {
    SPARSELM_CHECK(o.batch_size > 0, file.path().string(), ": batch_size must be > 0");
    opt_.windows.stride = win_.stride();
    set_epoch(0);
  }

  const lm_windows& windows() const noexcept { return win_; }
  std::uint64_t windows_per_epoch() const noexcept { return win_.count(); }
  const lm_sampler_options& options() const noexcept { return opt_; }

  // Window handed out at `position` of `epoch`.
  std::uint64_t window_at(std::uint64_t epoch, std::uint64_t position) const {
    if (opt_.order == lm_order::sequential) return position;
    if (epoch == epoch_) return perm_(position);
    return index_permutation(win_.count(), opt_.seed, epoch)(position);
  }

  // Fills b with the next B windows (continuing into the next epoch when needed).
  void next(lm_batch& b) {
    detail::shape_batch(b, opt_.batch_size, win_.seq_len(), opt_.batch_size);
    for (std::size_t r = 0; r < opt_.batch_size; ++r) {
      if (position_ == win_.count()) {
        set_epoch(epoch_ + 1);
        position_ = 0;
      }
      detail::fill_row(*file_, win_, window_at(epoch_, position_), opt_.pad_id, r, b);
      ++position_;
    }
  }
  lm_batch next() {
    lm_batch b;
    next(b);
    return b;
  }

  lm_sampler_state state() const noexcept { return {epoch_, position_, opt_.seed, win_.count()}; }
  void restore(const lm_sampler_state& s) {
    const std::string name = file_->path().string();
    SPARSELM_CHECK(s.windows == win_.count(), name, ": sampler state is for ", s.windows,
                   " windows per epoch, this data has ", win_.count(), " (different file or window options)");
    SPARSELM_CHECK(s.seed == opt_.seed, name, ": sampler state has seed ", s.seed, ", this sampler ", opt_.seed);
    SPARSELM_CHECK(s.position <= win_.count(), name, ": sampler state position ", s.position, " is past the ",
                   win_.count(), " windows of an epoch");
    set_epoch(s.epoch);
    position_ = s.position;
  }
  std::uint64_t epoch() const noexcept { return epoch_; }
  std::uint64_t position() const noexcept { return position_; }

 private:
  void set_epoch(std::uint64_t e) {
    epoch_ = e;
    if (opt_.order == lm_order::shuffled) perm_ = index_permutation(win_.count(), opt_.seed, e);
  }

  const token_file* file_;
  lm_sampler_options opt_;
  lm_windows win_;
  index_permutation perm_{};
  std::uint64_t epoch_ = 0, position_ = 0;
};

// One sequential pass over every window of a file (validation / evaluation). The last batch may
// have fewer than B rows (batch.rows).
class lm_eval_pass {
 public:
  lm_eval_pass(const token_file& file, std::size_t batch_size, lm_window_options w, std::int32_t pad_id = 0)
      : file_(&file), B_(batch_size), pad_(pad_id), win_(file.size(), file.sequence_length(), w, file.path().string()) {
    SPARSELM_CHECK(batch_size > 0, file.path().string(), ": batch_size must be > 0");
  }
  std::uint64_t windows() const noexcept { return win_.count(); }
  std::uint64_t batches() const noexcept { return (win_.count() + B_ - 1) / B_; }
  // Fills the next batch; false when the pass is over.
  bool next(lm_batch& b) {
    if (next_ >= win_.count()) return false;
    const std::size_t rows = std::size_t(std::min<std::uint64_t>(B_, win_.count() - next_));
    detail::shape_batch(b, B_, win_.seq_len(), rows);
    for (std::size_t r = 0; r < rows; ++r) detail::fill_row(*file_, win_, next_ + r, pad_, r, b);
    next_ += rows;
    return true;
  }
  void rewind() noexcept { next_ = 0; }

 private:
  const token_file* file_;
  std::size_t B_;
  std::int32_t pad_;
  lm_windows win_;
  std::uint64_t next_ = 0;
};

// Train + validation data for a causal LM: a training sampler over one token file and
// sequential validation passes over another (optional). Both files are opened and checked here.
class lm_data {
 public:
  lm_data(const std::filesystem::path& train, const std::filesystem::path& validation, lm_sampler_options o)
      : train_file_(std::make_unique<token_file>(train)), opt_(o) {
    train_ = std::make_unique<lm_sampler>(*train_file_, o);
    if (!validation.empty()) {
      valid_file_ = std::make_unique<token_file>(validation);
      SPARSELM_CHECK(valid_file_->vocab_size() == train_file_->vocab_size(), validation.string(), ": vocab size ",
                     valid_file_->vocab_size(), " differs from the training file's ", train_file_->vocab_size());
      lm_eval_pass probe(*valid_file_, o.batch_size, o.windows, o.pad_id);  // checks the windows fit
    }
  }
  lm_sampler& train() noexcept { return *train_; }
  const token_file& train_file() const noexcept { return *train_file_; }
  bool has_validation() const noexcept { return valid_file_ != nullptr; }
  const token_file& validation_file() const {
    SPARSELM_CHECK(valid_file_, "lm_data: no validation file was given");
    return *valid_file_;
  }
  // A fresh pass over the validation windows.
  lm_eval_pass validation() const {
    return lm_eval_pass(validation_file(), opt_.batch_size, opt_.windows, opt_.pad_id);
  }
  std::uint64_t vocab_size() const noexcept { return train_file_->vocab_size(); }

 private:
  std::unique_ptr<token_file> train_file_, valid_file_;
  std::unique_ptr<lm_sampler> train_;
  lm_sampler_options opt_;
};

}  // namespace sparselm::data
