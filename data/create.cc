#include "data/create.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/create_output.h"
#include "data/data_error.h"
#include "data/pack.h"
#include "data/shard.h"
#include "data/text_input.h"
#include "launch/util/file_io.h"
#include "launch/util/hash.h"
#include "launch/util/json_field.h"
#include "launch/util/parallel.h"

namespace joule::data {

uint64_t Rng::next_u64() { return mix64(state_ += kGoldenGamma); }

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t Rng::randint(int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high - low) + 1;
  if (range == 0) return static_cast<int64_t>(next_u64());
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return low + static_cast<int64_t>(x % range);
}

uint64_t Rng::below(uint64_t n) {
  // D. Lemire, "Fast Random Integer Generation in an Interval", ACM TOMACS 29(1), 2019 (arXiv:1805.10941).
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  if (static_cast<uint64_t>(m) < n) {
    const uint64_t threshold = (0 - n) % n;
    while (static_cast<uint64_t>(m) < threshold) m = static_cast<unsigned __int128>(next_u64()) * n;
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  Rng r(a * 0x100000001b3ull ^ (b + 0x51ed27)), s(r.next_u64() ^ (c * kGoldenGamma));
  return s.next_u64();
}

namespace {

// A segment's tokens [begin, end) of its buffer: truncation moves the bounds, never the tokens.
struct Span {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// The reference's truncate_seq_pair: drop a token from the front or the back (a fair coin) of the longer segment.
void truncate_pair(Span& a, Span& b, size_t max_tokens, Rng& rng) {
  while (a.size() + b.size() > max_tokens) {
    Span& t = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5)
      ++t.begin;
    else
      --t.end;
  }
}

// A sentence's token ids, inside its document's buffer.
struct Sentence {
  const int32_t* tokens;
  size_t size;
};
using Sentences = std::vector<Sentence>;

// A document's sentences as token ids, end to end in one buffer: one allocation per document, not per sentence, and
// one pointer from the document to any of its tokens.
struct Document {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> ends;  // one past each sentence's last token
  size_t sentences() const { return ends.size(); }
  Sentence sentence(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends[i - 1];
    return {tokens.data() + begin, ends[i] - begin};
  }
};

size_t tokens_in(const Sentences& sentences) {
  size_t n = 0;
  for (const Sentence& s : sentences) n += s.size;
  return n;
}

// Appends the tokens [span.begin, span.end) of the sentences laid end to end.
void append_span(const Sentences& sentences, Span span, std::vector<int32_t>& out) {
  size_t offset = 0;
  for (const Sentence& s : sentences) {
    const size_t begin = std::max(span.begin, offset), end = std::min(span.end, offset + s.size);
    if (begin < end) out.insert(out.end(), s.tokens + (begin - offset), s.tokens + (end - offset));
    offset += s.size;
    if (offset >= span.end) break;
  }
}

}  // namespace

void mask_instance(Instance& inst, const CreateOptions& o, const Vocab& vocab, const std::vector<bool>& is_continuation,
                   Rng& rng) {
  // Candidates are drawn in a random order as they are needed: a Fisher-Yates shuffle stopped once enough are masked,
  // the same distribution as the reference's shuffle of the whole candidate list.
  thread_local std::vector<int32_t> members;  // scratch, reused: no allocation per sequence
  thread_local std::vector<std::pair<int32_t, int32_t>> candidates, masked;
  thread_local std::vector<bool> covered;
  const int64_t to_predict =
      std::min<int64_t>(o.max_predictions,
                        std::max<int64_t>(1, std::llround(static_cast<double>(inst.tokens.size()) * o.masked_lm_prob)));
  masked.clear();                                 // (position, original id)
  auto mask = [&](size_t index) {                 // the reference's 80 % [MASK], 10 % unchanged, 10 % a random token
    const int32_t original = inst.tokens[index];  // not masked yet: every position is masked once at most
    int32_t replacement;
    if (rng.uniform() < 0.8)
      replacement = vocab.mask_id();
    else if (rng.uniform() < 0.5)
      replacement = original;
    else
      replacement = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab.size())));
    inst.tokens[index] = replacement;
    masked.emplace_back(static_cast<int32_t>(index), original);
  };
  // Every position but [CLS] and [SEP]: without whole-word masking, each is a candidate of its own.
  members.resize(inst.tokens.size());
  size_t positions = 0;
  for (size_t i = 0; i < inst.tokens.size(); ++i)
    if (inst.tokens[i] != vocab.cls_id() && inst.tokens[i] != vocab.sep_id())
      members[positions++] = static_cast<int32_t>(i);
  members.resize(positions);
  if (!o.whole_word_mask) {
    for (size_t k = 0; k < positions && static_cast<int64_t>(masked.size()) < to_predict; ++k) {
      std::swap(members[k], members[k + rng.below(positions - k)]);
      mask(static_cast<size_t>(members[k]));
    }
  } else {
    // A word's pieces ([begin, end) ranges into `members`) are one candidate, masked together or not at all.
    candidates.clear();
    for (size_t m = 0; m < positions; ++m) {
      const bool joins = m > 0 && is_continuation[static_cast<size_t>(inst.tokens[static_cast<size_t>(members[m])])];
      if (!joins) candidates.emplace_back(static_cast<int32_t>(m), static_cast<int32_t>(m));
      candidates.back().second = static_cast<int32_t>(m + 1);
    }
    covered.assign(inst.tokens.size(), false);
    for (size_t k = 0; k < candidates.size() && static_cast<int64_t>(masked.size()) < to_predict; ++k) {
      std::swap(candidates[k], candidates[k + rng.below(candidates.size() - k)]);
      const auto [begin, end] = candidates[k];
      if (static_cast<int64_t>(masked.size()) + (end - begin) > to_predict) continue;
      if (std::any_of(members.begin() + begin, members.begin() + end,
                      [&](int32_t i) { return covered[static_cast<size_t>(i)]; }))
        continue;
      for (int32_t m = begin; m < end; ++m) {
        covered[static_cast<size_t>(members[static_cast<size_t>(m)])] = true;
        mask(static_cast<size_t>(members[static_cast<size_t>(m)]));
      }
    }
    // Every word can be longer than the budget: mask one piece rather than leave a row with no prediction (its
    // masked-LM loss would be undefined, and shard validation refuses such rows).
    if (masked.empty() && !candidates.empty()) {
      const int32_t index = members[static_cast<size_t>(candidates.front().first)];
      masked.emplace_back(index, inst.tokens[static_cast<size_t>(index)]);
      inst.tokens[static_cast<size_t>(index)] = vocab.mask_id();
    }
  }
  std::sort(masked.begin(), masked.end());
  inst.masked_positions.clear();
  inst.masked_ids.clear();
  inst.masked_positions.reserve(masked.size());
  inst.masked_ids.reserve(masked.size());
  for (const auto& [pos, id] : masked) {
    inst.masked_positions.push_back(pos);
    inst.masked_ids.push_back(id);
  }
}

namespace {

// Google's create_instances_from_document: hands each masked sequence to `emit` (a scratch Instance, reused: no
// allocation per sequence).
template <typename Emit>
void each_instance(const std::vector<Document>& documents, size_t index, const CreateOptions& o, const Vocab& vocab,
                   const std::vector<bool>& is_continuation, Rng& rng, Emit&& emit) {
  const Document& document = documents[index];
  const int64_t max_tokens = o.seq_len - 3;
  int64_t target = max_tokens;
  if (rng.uniform() < o.short_seq_prob) target = rng.randint(2, max_tokens);

  thread_local Instance inst;
  thread_local Sentences chunk;
  chunk.clear();
  int64_t chunk_length = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(document.sentences()); ++i) {
    chunk.push_back(document.sentence(static_cast<size_t>(i)));
    chunk_length += static_cast<int64_t>(chunk.back().size);
    if (i != static_cast<int64_t>(document.sentences()) - 1 && chunk_length < target) continue;
    if (!chunk.empty()) {
      const int64_t a_end = chunk.size() >= 2 ? rng.randint(1, static_cast<int64_t>(chunk.size()) - 1) : 1;
      // Segments as lists of sentences: only the tokens that survive truncation are copied, once, into the sequence.
      thread_local Sentences a, b;
      a.assign(chunk.begin(), chunk.begin() + a_end);
      b.clear();
      const size_t a_size = tokens_in(a);
      size_t b_size = 0;
      bool random_next = false;
      if (chunk.size() == 1 || rng.uniform() < 0.5) {
        random_next = true;
        const int64_t target_b = target - static_cast<int64_t>(a_size);
        // Another document, never this one (Google's script retries 10 times and then keeps whatever it drew).
        size_t other = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(documents.size()) - 2));
        if (other >= index) ++other;
        const Document& random_doc = documents[other];
        const int64_t sentences = static_cast<int64_t>(random_doc.sentences());
        for (int64_t j = rng.randint(0, sentences - 1); j < sentences; ++j) {
          b.push_back(random_doc.sentence(static_cast<size_t>(j)));
          b_size += b.back().size;
          if (static_cast<int64_t>(b_size) >= target_b) break;
        }
        i -= static_cast<int64_t>(chunk.size()) - a_end;  // the unused segments are used again
      } else {
        b.assign(chunk.begin() + a_end, chunk.end());
        b_size = tokens_in(b);
      }
      Span span_a{0, a_size}, span_b{0, b_size};
      truncate_pair(span_a, span_b, static_cast<size_t>(max_tokens), rng);
      if (span_a.size() > 0 && span_b.size() > 0) {
        inst.tokens.clear();
        inst.tokens.push_back(vocab.cls_id());
        append_span(a, span_a, inst.tokens);
        inst.tokens.push_back(vocab.sep_id());
        inst.segment_b = static_cast<int32_t>(inst.tokens.size());
        append_span(b, span_b, inst.tokens);
        inst.tokens.push_back(vocab.sep_id());
        inst.is_random_next = random_next;
        mask_instance(inst, o, vocab, is_continuation, rng);
        emit(static_cast<const Instance&>(inst));
      }
    }
    chunk.clear();
    chunk_length = 0;
  }
}

}  // namespace

namespace {

// Peak bytes one chunk needs per byte of its input text (dupes are made one at a time): measured 3.8 (dupe factor 1)
// and 4.4 (dupe factor 5) between chunks of 5 and 20 MB, and 6.1 over the 179 MB chunks of a 1 GB run on 2 threads,
// with `joule data synth` text at seq_len 128 (BENCHMARKS.md): the text and the next chunk's read ahead, the token
// ids, one dupe's sequences with their masks, the shard writer's slices; 10 leaves room for the allocator's
// fragmentation over many chunks and for more worker threads.
double bytes_per_input_byte(const CreateOptions&) { return 10.0; }

constexpr int64_t kMiB = 1 << 20;
// Memory outside the chunk: the process before it reads (the joule binary maps LibTorch: ~180 MB resident), the
// allocator's slack, HDF5's chunk caches and thread stacks. A constant, not this process's measured size, so that the
// same budget cuts the same chunks on every machine (the output depends on the chunks).
constexpr int64_t kReserve = 256 * kMiB;

// Input bytes per chunk: from --shards (equal parts of the plain-text input), --shard-mb, or the memory budget.
int64_t plan_chunk_bytes(const CreateOptions& o, const std::vector<std::string>& files, std::string& how) {
  const double per_byte = bytes_per_input_byte(o);
  const int64_t affordable = static_cast<int64_t>(static_cast<double>(o.memory_budget - kReserve) / per_byte);
  auto mb = [](int64_t b) { return std::to_string((b + kMiB / 2) / kMiB) + " MB"; };
  if (affordable < kMiB)
    throw joule::UsageError(
        "data create: --memory-budget " + mb(o.memory_budget) + " leaves no room for a chunk of text (" + mb(kReserve) +
            " go to the process itself, and 1 MB of input needs about " + mb(static_cast<int64_t>(per_byte * kMiB)) +
            ")",
        "raise --memory-budget (at least " + mb(kReserve + static_cast<int64_t>(per_byte * 4 * kMiB)) + ")");
  int64_t chunk = 0;
  if (o.shards > 0) {
    const int64_t total = plain_text_bytes(files);
    if (total < 0)
      throw joule::UsageError("data create: --shards needs the input's size, which gzip-compressed inputs do not tell",
                              "give --shard-mb (input MB per shard) instead of --shards");
    chunk = std::max<int64_t>(1, (total + o.shards - 1) / o.shards);
    how = "--shards " + std::to_string(o.shards) + " over " + mb(total) + " of text";
  } else if (o.shard_mb > 0) {
    chunk = static_cast<int64_t>(o.shard_mb * static_cast<double>(kMiB));
    how = "--shard-mb";
  } else {
    chunk = std::min<int64_t>(affordable, static_cast<int64_t>(kDefaultChunkMb * kMiB));
    how = affordable < kDefaultChunkMb * kMiB ? "as large as --memory-budget " + mb(o.memory_budget) + " allows"
                                              : "the default";
    chunk -= chunk % kMiB;  // a round figure: the same budget gives the same chunks on another machine
  }
  if (chunk > affordable)
    throw joule::UsageError("data create: chunks of " + mb(chunk) + " of text (" + how + ") need about " +
                                mb(kReserve + static_cast<int64_t>(per_byte * static_cast<double>(chunk))) +
                                ", over --memory-budget " + mb(o.memory_budget),
                            "ask for more shards (or a smaller --shard-mb), or raise --memory-budget");
  return chunk;
}

// What makes the data set: a rerun with equal arguments may resume it, a different one may not mix with it.
nlohmann::json create_arguments(const CreateOptions& o, const std::vector<std::string>& files, int64_t chunk_bytes) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& f : files) {
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(f, ec).time_since_epoch();
    const auto bytes = ec ? 0 : std::filesystem::file_size(f, ec);
    if (ec)  // listed a moment ago, gone or unreadable now: an error, never a record of 2^64-1 bytes
      throw joule::IoError(f + ": cannot read its size and time: " + ec.message(),
                           "check that the input is still there and readable, then rerun");
    inputs.push_back({{"path", f},
                      {"bytes", bytes},
                      {"mtime_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(mtime).count()}});
  }
  nlohmann::json arguments = {{"inputs", inputs},
                              {"vocab_fnv1a64", joule::hex64(joule::fnv1a64_file(o.vocab))},
                              {"seq_len", o.seq_len},
                              {"max_predictions", o.max_predictions},
                              {"dupe_factor", o.dupe_factor},
                              {"seed", o.seed},
                              {"lower_case", o.lower_case},
                              {"whole_word_mask", o.whole_word_mask},
                              {"masked_lm_prob", o.masked_lm_prob},
                              {"short_seq_prob", o.short_seq_prob},
                              {"eval_documents", o.eval_documents},
                              {"chunk_bytes", chunk_bytes},
                              {"skip_bad_input", o.skip_bad_input}};
  if (o.pack > 0) arguments["pack"] = o.pack;  // absent when padded: earlier data sets' arguments stay equal
  return arguments;
}

// Everything one chunk needs besides its text.
struct ChunkContext {
  const CreateOptions& options;
  const Vocab& vocab;
  const FullTokenizer& tokenizer;
  const std::vector<bool>& is_continuation;
  int threads;
};

// Streams of the generator per chunk, so that a chunk's output depends on the seed and its index only.
enum Stream : uint64_t {
  kDocumentShuffle = 1,
  kInstanceShuffle = 2,
  kPackShuffle = 3,
  kTrainDupes = 16,
  kEvalDupes = 1u << 20
};
uint64_t chunk_seed(const CreateOptions& o, int64_t chunk, uint64_t stream, uint64_t item = 0) {
  return mix_seed(mix_seed(o.seed, static_cast<uint64_t>(chunk), 0xC4u), stream, item);
}

// The chunk's documents as token ids (sentences without tokens dropped, then documents without sentences).
std::vector<Document> tokenize_chunk(const TextChunk& chunk, const ChunkContext& c) {
  std::vector<Document> documents(chunk.documents());
  joule::parallel_for(documents.size(), c.threads, [&](size_t d, int) {
    Document& document = documents[d];
    for (size_t s = chunk.first_sentence(d); s < chunk.document_ends[d]; ++s) {
      const size_t before = document.tokens.size();
      c.tokenizer.encode(chunk.sentence(s), document.tokens);
      if (document.tokens.size() > before) document.ends.push_back(static_cast<uint32_t>(document.tokens.size()));
    }
    document.tokens.shrink_to_fit();
  });
  documents.erase(std::remove_if(documents.begin(), documents.end(), [](const Document& d) { return d.ends.empty(); }),
                  documents.end());
  return documents;
}

// Sequences end to end in blocks of 4 MiB: each one's tokens, then its masked positions, then the ids. Blocks, not
// one growing buffer: no copy when it grows, at most one block unused, and they are kept from dupe to dupe.
class PackedInstances {
 public:
  struct Ref {
    uint32_t offset = 0;  // block * kBlock + position in the block
    uint16_t tokens = 0, segment_b = 0, masked = 0;
    bool random_next = false;
  };
  static constexpr uint32_t kBlock = 1u << 20;  // int32 values per block

  void add(const Instance& inst) {
    const size_t n = inst.tokens.size() + 2 * inst.masked_positions.size();
    if (fill_ + n > kBlock) {  // the next block (sequences are far shorter than a block)
      if (++used_ > blocks_.size()) blocks_.emplace_back(new int32_t[kBlock]);
      if (blocks_.size() > UINT32_MAX / kBlock)
        throw joule::InternalError("data create: one worker's sequences outgrew 32-bit offsets");
      fill_ = 0;
    }
    refs_.push_back({static_cast<uint32_t>((used_ - 1) * kBlock + fill_), static_cast<uint16_t>(inst.tokens.size()),
                     static_cast<uint16_t>(inst.segment_b), static_cast<uint16_t>(inst.masked_positions.size()),
                     inst.is_random_next});
    int32_t* to = blocks_[used_ - 1].get() + fill_;
    to = std::copy(inst.tokens.begin(), inst.tokens.end(), to);
    to = std::copy(inst.masked_positions.begin(), inst.masked_positions.end(), to);
    std::copy(inst.masked_ids.begin(), inst.masked_ids.end(), to);
    fill_ += n;
  }
  void clear() {  // keeps the blocks
    refs_.clear();
    used_ = 0;
    fill_ = kBlock;
  }
  const std::vector<Ref>& refs() const { return refs_; }
  const int32_t* data(const Ref& ref) const { return blocks_[ref.offset / kBlock].get() + ref.offset % kBlock; }

 private:
  std::vector<std::unique_ptr<int32_t[]>> blocks_;  // not zeroed: every value read was written
  std::vector<Ref> refs_;
  size_t used_ = 0, fill_ = kBlock;
};

// One dupe of every document. Each worker's sequences go to its own buffer, document after document in the order
// parallel_for deals them out; every document's sequences come from its own generator stream. `order` lists every
// sequence in document order, then shuffled (the same permutation as shuffling the sequences themselves, without
// moving them), so neither the rows nor their order depend on the worker count. Reused from dupe to dupe: the
// buffers keep their memory.
struct Dupe {
  std::vector<PackedInstances> per_worker;
  std::vector<std::pair<uint32_t, uint32_t>> document_end;  // per document: (worker, one past its last ref there)
  std::vector<std::pair<uint32_t, uint32_t>> order;         // (worker, ref)

  const PackedInstances::Ref& ref(size_t row) const { return per_worker[order[row].first].refs()[order[row].second]; }
  const int32_t* tokens(size_t row) const { return per_worker[order[row].first].data(ref(row)); }
};

void make_dupe(const std::vector<Document>& documents, int64_t chunk, uint64_t stream, const ChunkContext& c,
               Dupe& dupe) {
  dupe.per_worker.resize(static_cast<size_t>(c.threads));
  for (PackedInstances& packed : dupe.per_worker) packed.clear();
  dupe.document_end.resize(documents.size());
  joule::parallel_for(documents.size(), c.threads, [&](size_t d, int worker) {
    Rng rng(chunk_seed(c.options, chunk, stream, d));
    PackedInstances& packed = dupe.per_worker[static_cast<size_t>(worker)];
    each_instance(documents, d, c.options, c.vocab, c.is_continuation, rng,
                  [&](const Instance& inst) { packed.add(inst); });
    dupe.document_end[d] = {static_cast<uint32_t>(worker), static_cast<uint32_t>(packed.refs().size())};
  });
  size_t sequences = 0;
  for (const PackedInstances& packed : dupe.per_worker) sequences += packed.refs().size();
  dupe.order.clear();
  dupe.order.reserve(sequences);
  std::vector<uint32_t> next(dupe.per_worker.size(), 0);  // each worker's first ref not yet listed
  for (const auto& [worker, end] : dupe.document_end)
    for (uint32_t& r = next[worker]; r < end; ++r) dupe.order.emplace_back(worker, r);
  Rng(chunk_seed(c.options, chunk, kInstanceShuffle, stream)).shuffle(dupe.order);
}

// Rows [begin, end) of the dupe's order into `b` in the shard layout (padded with zeros to seq_len and
// max_predictions), on the workers: every element of every row is written here, so `b` is not zeroed first. `b` is
// reused from slice to slice (no fresh pages).
void to_host(const Dupe& dupe, size_t begin, size_t end, const ChunkContext& c, HostBatch& b) {
  const int64_t seq_len = c.options.seq_len, max_predictions = c.options.max_predictions;
  b.resize_for_overwrite(static_cast<int64_t>(end - begin), seq_len, max_predictions);
  constexpr size_t kBlock = 256;
  joule::parallel_for((end - begin + kBlock - 1) / kBlock, c.threads, [&](size_t block, int) {
    const size_t first = block * kBlock, last = std::min(end - begin, (block + 1) * kBlock);
    for (size_t r = first; r < last; ++r) {
      // The rows are in shuffled order, each somewhere else in the workers' buffers: fetch the next rows' ahead.
      if (r + 8 < last) __builtin_prefetch(&dupe.ref(begin + r + 8));
      if (r + 4 < last) __builtin_prefetch(dupe.tokens(begin + r + 4));
      const PackedInstances::Ref& ref = dupe.ref(begin + r);
      const int32_t* tokens = dupe.tokens(begin + r);
      const int32_t* positions = tokens + ref.tokens;
      const int32_t* ids = positions + ref.masked;
      int32_t* input_ids = b.input_ids.data() + r * seq_len;
      int32_t* input_mask = b.input_mask.data() + r * seq_len;
      int32_t* segment_ids = b.segment_ids.data() + r * seq_len;
      std::fill(std::copy(tokens, tokens + ref.tokens, input_ids), input_ids + seq_len, 0);
      std::fill(std::fill_n(input_mask, ref.tokens, 1), input_mask + seq_len, 0);
      std::fill(std::fill_n(std::fill_n(segment_ids, ref.segment_b, 0), ref.tokens - ref.segment_b, 1),
                segment_ids + seq_len, 0);
      int32_t* masked_positions = b.masked_positions.data() + r * max_predictions;
      int32_t* masked_ids = b.masked_ids.data() + r * max_predictions;
      std::fill(std::copy(positions, positions + ref.masked, masked_positions), masked_positions + max_predictions, 0);
      std::fill(std::copy(ids, ids + ref.masked, masked_ids), masked_ids + max_predictions, 0);
      b.next_sentence_labels[r] = ref.random_next ? 1 : 0;
    }
  });
}

// Packed rows [begin, end) of `packs` (lists of rows of the dupe's order) into `b`, on the workers.
void to_host_packed(const Dupe& dupe, const std::vector<std::vector<uint32_t>>& packs, size_t begin, size_t end,
                    const ChunkContext& c, HostBatch& b) {
  const int pack = c.options.pack;
  b.resize_for_overwrite(static_cast<int64_t>(end - begin), c.options.seq_len,
                         packed_max_predictions(c.options.max_predictions, pack), pack);
  constexpr size_t kBlock = 256;
  joule::parallel_for((end - begin + kBlock - 1) / kBlock, c.threads, [&](size_t block, int) {
    std::vector<SequenceView> views;
    for (size_t r = block * kBlock; r < std::min(end - begin, (block + 1) * kBlock); ++r) {
      views.clear();
      for (const uint32_t row : packs[begin + r]) {
        const PackedInstances::Ref& ref = dupe.ref(row);
        SequenceView v;
        v.input_ids = dupe.tokens(row);
        v.segment_b = ref.segment_b;
        v.length = ref.tokens;
        v.masked_positions = v.input_ids + ref.tokens;
        v.masked_ids = v.masked_positions + ref.masked;
        v.masked = ref.masked;
        v.next_sentence_label = ref.random_next ? 1 : 0;
        views.push_back(v);
      }
      write_packed_row(views.data(), static_cast<int>(views.size()), b, static_cast<int64_t>(r));
    }
  });
}

// Writes `dupes` dupes of the documents as one shard, one dupe at a time (memory holds one dupe's sequences), each
// dupe's sequences shuffled (with options.pack: packed, and the packed rows shuffled), appended a slice at a time (the
// padded layout is ~2x the sequences' size). Returns the shard's counts.
nlohmann::json write_dupes(const std::string& path, const std::vector<Document>& documents, int dupes, int64_t chunk,
                           uint64_t stream, const ChunkContext& c, const std::function<void()>& dupe_written) {
  constexpr size_t kSlice = 8192;
  const CreateOptions& o = c.options;
  ShardWriter writer(path, ShardWriter::kGrowing, o.seq_len,
                     o.pack > 0 ? packed_max_predictions(o.max_predictions, o.pack) : o.max_predictions, 64, c.threads,
                     o.pack);
  int64_t masked = 0, tokens = 0, random = 0, sequences = 0;
  HostBatch slice;
  Dupe dupe;
  for (int d = 0; d < dupes; ++d) {
    make_dupe(documents, chunk, stream + static_cast<uint64_t>(d), c, dupe);
    for (const PackedInstances& packed : dupe.per_worker)
      for (const PackedInstances::Ref& ref : packed.refs()) {
        masked += ref.masked;
        tokens += ref.tokens;
        random += ref.random_next ? 1 : 0;
      }
    sequences += static_cast<int64_t>(dupe.order.size());
    if (o.pack > 0) {
      std::vector<int32_t> lengths(dupe.order.size());
      for (size_t row = 0; row < lengths.size(); ++row) lengths[row] = dupe.ref(row).tokens;
      std::vector<std::vector<uint32_t>> packs = pack_sequences(lengths, o.seq_len, o.pack);
      Rng(chunk_seed(o, chunk, kPackShuffle, stream + static_cast<uint64_t>(d))).shuffle(packs);
      for (size_t begin = 0; begin < packs.size(); begin += kSlice) {
        to_host_packed(dupe, packs, begin, std::min(packs.size(), begin + kSlice), c, slice);
        writer.append(slice);
      }
    } else {
      for (size_t begin = 0; begin < dupe.order.size(); begin += kSlice) {
        to_host(dupe, begin, std::min(dupe.order.size(), begin + kSlice), c, slice);
        writer.append(slice);
      }
    }
    dupe_written();
  }
  const int64_t rows = writer.rows_written();
  if (rows > 0) writer.commit();
  return {{"sequences", sequences},
          {"rows", rows},
          {"masked_predictions", masked},
          {"tokens", tokens},
          {"random_next", random}};
}

// One chunk: tokenize, shuffle its documents, hold out the eval documents (chunk 0), make and write its shards.
// `share_done` hears the share of the chunk's work done: its tokenizing and each dupe count one part each.
nlohmann::json process_chunk(TextChunk&& chunk, const ChunkContext& c, PartialDataSet& out,
                             const std::function<void(double)>& share_done) {
  const CreateOptions& o = c.options;
  const bool holds_eval = chunk.index == 0 && o.eval_documents > 0;
  const double parts = 1.0 + o.dupe_factor + (holds_eval ? 1 : 0);
  double parts_done = 0;
  const auto part_done = [&] { share_done(++parts_done / parts); };
  std::vector<Document> documents = tokenize_chunk(chunk, c);
  part_done();
  const std::string where = "data create: the chunk of text from " + chunk.first_line;
  const int64_t index = chunk.index;
  chunk.clear();
  chunk.text.shrink_to_fit();
  Rng(chunk_seed(o, index, kDocumentShuffle)).shuffle(documents);
  nlohmann::json record = {{"index", index}, {"input_bytes", 0}};
  std::vector<Document> eval_documents;
  if (holds_eval) {
    if (o.eval_documents > static_cast<int64_t>(documents.size()) - 2)
      throw joule::UsageError(
          where + " holds " + std::to_string(documents.size()) + " documents: --eval-documents " +
              std::to_string(o.eval_documents) + " leaves fewer than 2 for training",
          "ask for fewer eval documents (they come from the first chunk), or a larger first chunk (--shard-mb)");
    eval_documents.assign(std::make_move_iterator(documents.end() - o.eval_documents),
                          std::make_move_iterator(documents.end()));
    documents.resize(documents.size() - static_cast<size_t>(o.eval_documents));
    std::filesystem::create_directories(std::filesystem::path(out.dir()) / "eval");
    const nlohmann::json eval =
        write_dupes(out.shard_path("eval", 0), eval_documents, 1, index, kEvalDupes, c, part_done);
    if (eval["sequences"] == 0) throw CorpusError(where + ": the held-out documents produced no eval sequences");
    record["eval"] = out.shard_record("eval", 0, eval["rows"]);
    record["eval_sequences"] = eval["sequences"];
    record["eval_documents"] = eval_documents.size();
  }
  if (documents.size() < 2)
    throw CorpusError(where + " holds " + std::to_string(documents.size()) +
                      " document(s) with words; NSP needs at least 2 (separate documents with a blank line)");
  std::filesystem::create_directories(std::filesystem::path(out.dir()) / "train");
  const nlohmann::json train =
      write_dupes(out.shard_path("train", index), documents, o.dupe_factor, index, kTrainDupes, c, part_done);
  if (train["sequences"] == 0) throw CorpusError(where + " produced no training sequences");
  record["train"] = out.shard_record("train", index, train["rows"]);
  record["sequences"] = train["sequences"];
  record["documents"] = documents.size();
  for (const char* key : {"masked_predictions", "tokens", "random_next"}) record[key] = train[key];
  return record;
}

template <typename T>
T sum_over(const nlohmann::json& chunks, const char* key) {
  T total = 0;
  for (const auto& c : chunks) total += c.value(key, T{0});
  return total;
}

// A finished data set's shard, as metadata.json lists it: the entry stays inside `out`, and the file is there with the
// size and checksum recorded when it was made (else the data set was changed since, and is not this one any more).
std::string verified_shard(const nlohmann::json& entry, const std::string& out, const std::string& where) {
  const std::string file = json_field<std::string>(entry, "file", where);
  const std::string path = joule::path_inside(out, file, where);
  const std::string problem =
      joule::listed_file_problem(path, json_field<uint64_t>(entry, "bytes", where),
                                 json_field<std::string>(entry, "fnv1a64", where), "metadata.json");
  if (!problem.empty())
    throw CorpusError(path + " " + problem + ": the finished data set in " + out + " was changed after it was made",
                      "restore the shard, or rerun with --replace to make the data set again");
  return path;
}

// The figures of a finished data set from its metadata.json; `verify`: each shard checked against its record too.
CreateSummary summary_of(const nlohmann::json& meta, const std::string& out, bool verify) {
  CreateSummary s;
  const std::string where = (std::filesystem::path(out) / "metadata.json").string();
  const nlohmann::json& chunks = json_field<nlohmann::json>(meta, "chunks", where);
  if (verify && !std::filesystem::is_regular_file(std::filesystem::path(out) / "vocab.txt"))
    throw CorpusError(out + "/vocab.txt is missing: the finished data set in " + out + " was changed after it was made",
                      "restore it, or rerun with --replace to make the data set again");
  s.documents = sum_over<int64_t>(chunks, "documents");
  s.eval_documents = sum_over<int64_t>(chunks, "eval_documents");
  s.masked_predictions = sum_over<int64_t>(chunks, "masked_predictions");
  s.tokens = sum_over<int64_t>(chunks, "tokens");
  s.random_next = sum_over<int64_t>(chunks, "random_next");
  s.input_bytes = sum_over<int64_t>(chunks, "input_bytes");
  s.chunks = static_cast<int64_t>(chunks.size());
  s.chunk_bytes = json_field<int64_t>(json_field<nlohmann::json>(meta, "arguments", where), "chunk_bytes", where);
  for (const auto& c : chunks) {
    for (const char* split : {"train", "eval"}) {
      if (std::string(split) == "eval" && !c.contains("eval")) continue;
      const nlohmann::json& entry = json_field<nlohmann::json>(c, split, where + " chunks");
      const std::string path = verify ? verified_shard(entry, out, where)
                                      : joule::path_inside(out, json_field<std::string>(entry, "file", where), where);
      // A shard's record counts its rows; a chunk's "sequences"/"eval_sequences" the sequences they hold, where they
      // differ (packed rows; older data sets did not record them: one sequence a row).
      const bool train = std::string(split) == "train";
      const int64_t rows = json_field<int64_t>(entry, "sequences", where);
      (train ? s.train_rows : s.eval_rows) += rows;
      (train ? s.train_sequences : s.eval_sequences) +=
          json_field_or<int64_t>(c, train ? "sequences" : "eval_sequences", rows, where + " chunks");
      (std::string(split) == "train" ? s.train_shards : s.eval_shards).push_back(path);
    }
  }
  return s;
}

}  // namespace

CreateSummary create_pretraining_data(const CreateOptions& o) {
  if (o.seq_len < 8 || o.seq_len > 65535 || o.max_predictions < 1 || o.dupe_factor < 1 || o.shards < 0 ||
      o.shard_mb < 0)
    throw joule::UsageError(
        "data create: --seq-len must be in [8, 65535], --max-pred and --dupe-factor >= 1, --shards and --shard-mb >= "
        "0");
  if (o.eval_documents < 0) throw joule::UsageError("data create: --eval-documents must be >= 0");
  if (o.inputs.empty()) throw joule::UsageError("data create: no --input text");
  const std::vector<std::string> files = expand_inputs(o.inputs);
  const Vocab vocab = Vocab::load(o.vocab);
  const FullTokenizer tokenizer(vocab, o.lower_case);
  std::vector<bool> is_continuation(static_cast<size_t>(vocab.size()));
  for (int64_t i = 0; i < vocab.size(); ++i)
    is_continuation[static_cast<size_t>(i)] = vocab.token(static_cast<int32_t>(i)).rfind("##", 0) == 0;
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  std::string how;
  const int64_t chunk_bytes = plan_chunk_bytes(o, files, how);
  const nlohmann::json arguments = create_arguments(o, files, chunk_bytes);
  if (const nlohmann::json done = existing_data_set(o.out, arguments, o.replace); !done.is_null()) {
    CreateSummary s = summary_of(done, o.out, /*verify=*/true);  // "nothing to do" only for the data set it was
    s.already_complete = true;
    return s;
  }

  PartialDataSet out(o.out, arguments, o.replace);
  const ChunkContext context{o, vocab, tokenizer, is_continuation, threads};
  TextLimits limits;
  limits.max_document_bytes = chunk_bytes;  // a document must fit in one chunk
  limits.skip_bad = o.skip_bad_input;
  DocumentChunker chunker(files, chunk_bytes, limits);
  TextChunk chunk;
  nlohmann::json records = out.chunks();
  int64_t bytes_done = 0;  // of the chunks before the one at hand
  const int64_t bytes_in_all = o.on_progress ? plain_text_bytes(files) : -1;
  const auto progress = [&](int64_t bytes) {
    if (o.on_progress) o.on_progress(bytes, bytes_in_all);
  };
  while (chunker.next(chunk)) {
    const int64_t index = chunk.index, input_bytes = chunk.input_bytes;
    if (index < static_cast<int64_t>(out.resumed_chunks())) {  // verified complete by an earlier run
      progress(bytes_done += input_bytes);
      continue;
    }
    nlohmann::json record = process_chunk(std::move(chunk), context, out, [&](double share) {
      progress(bytes_done + static_cast<int64_t>(std::llround(share * static_cast<double>(input_bytes))));
    });
    bytes_done += input_bytes;
    record["input_bytes"] = input_bytes;
    out.record_chunk(record);
    records.push_back(std::move(record));
    malloc_trim(0);  // give the chunk's memory back: the worker threads' arenas would keep it for the next chunk
  }
  if (records.empty()) throw CorpusError("data create: the input holds no text");
  if (o.eval_documents > 0 && !records[0].contains("eval"))
    throw joule::InternalError("data create: the eval shard of chunk 0 is missing");

  vocab.save((std::filesystem::path(out.dir()) / "vocab.txt").string());
  const TextStats& read = chunker.stats();
  nlohmann::json meta = {{"format", "joule-pretraining-data"},
                         {"format_version", 2},
                         {"vocab_size", vocab.size()},
                         {"seq_len", o.seq_len},
                         {"max_predictions", o.max_predictions},
                         {"arguments", arguments},
                         {"chunks", records},
                         {"chunk_plan", how},
                         {"order",
                          "each shard holds one chunk of input documents: its sequences dupe after dupe, each dupe "
                          "shuffled; shards in input order (the trainer's loader shuffles globally)"},
                         {"skipped",
                          {{"invalid_utf8_lines", read.skipped_invalid_utf8_lines},
                           {"long_lines", read.skipped_long_lines},
                           {"long_documents", read.skipped_long_documents},
                           {"empty_files", read.skipped_empty_files},
                           {"first", read.first_skip}}}};
  CreateSummary summary = summary_of(meta, o.out, /*verify=*/false);
  meta["documents"] = summary.documents;
  meta["eval_documents"] = summary.eval_documents;
  meta["train_sequences"] = summary.train_sequences;
  meta["eval_sequences"] = summary.eval_sequences;
  if (o.pack > 0) {  // what the directories hold (data/dataset.cc checks it): rows, each up to `pack` sequences
    meta["train_rows"] = summary.train_rows;
    meta["eval_rows"] = summary.eval_rows;
    meta["packing"] = packing_record(o.pack, std::string(kPackingAlgorithm) + ", each dupe on its own",
                                     summary.train_sequences, summary.train_rows, summary.tokens, o.seq_len);
  }
  meta["train_shards"] = summary.train_shards.size();
  meta["masked_predictions"] = summary.masked_predictions;
  out.finish(meta);
  summary.resumed_chunks = static_cast<int64_t>(out.resumed_chunks());
  summary.notes = out.notes();
  summary.skipped = read.skipped();
  summary.first_skip = read.first_skip;
  return summary;
}

}  // namespace joule::data
