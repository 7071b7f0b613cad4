// The routing kernels' ABI: the structs they take by value. Included by NVRTC (device side) and by
// the host library (launcher side), so both agree on the layout. Plain C++ only: no CUDA headers.
#pragma once

namespace moejit {

// Scoring rules (values mirrored by moejit::RoutingScore on the host).
enum RoutingScoreCode : int {
  kScoreSoftmaxTopk = 0,  // softmax over all experts, then top-k (Qwen3, optionally renormalized)
  kScoreTopkSoftmax = 1,  // top-k of the logits, softmax over the k (Mixtral, gpt-oss)
  kScoreSigmoidTopk = 2,  // sigmoid, + correction bias for the choice, group-limited top-k (DeepSeek-V3)
};

// One route() call. Arrays are device pointers; "routed rows" is the row space of the grouped GEMMs
// (contiguous: [0, group_offsets[E]); masked: g * capacity + i).
struct RoutingParams {
  const void* logits;             // [num_tokens, E], bf16 or f32
  const float* correction_bias;   // [E] or null (sigmoid scoring only)
  int* topk_ids;                  // [num_tokens, top_k]
  float* topk_weights;            // [num_tokens, top_k]
  int* block_counts;              // workspace [num_ctas, E]: per-CTA histogram, then per-CTA base
  int* group_offsets;             // contiguous: E + 1 (padded to row_alignment); null in masked
  int* group_counts;              // E rows per expert (masked: clipped to capacity); may be null in contiguous
  int* gather_rows;               // routed row -> token
  int* scatter_rows;              // routed row -> token * top_k + slot; -1 for padding rows
  float* routing_weights;         // routed row -> weight; 0 for padding rows
  int* row_of_slot;               // [num_tokens * top_k] -> routed row (-1: dropped), or null
  int num_tokens;
  int tokens_per_cta;
  int layout;                     // 0: contiguous, 1: masked (kLayout* in common/scheduler.cuh)
  int row_alignment;              // contiguous: every group starts at a multiple of it
  int capacity;                   // masked: rows per expert slab
  float scaling_factor;           // multiplies every weight last
};

// combine(): out[t, :] = sum over slots j in order 0..top_k-1 of (w[t, j] *) in[t, j, :].
struct CombineParams {
  const void* input;          // [num_tokens, top_k, n]
  void* output;               // [num_tokens, n]
  const float* topk_weights;  // [num_tokens, top_k] or null (weights already applied)
  const int* row_of_slot;     // [num_tokens, top_k] or null: slots whose row is negative are skipped
  long long num_vectors;      // num_tokens * n / 8
  int n;
  int reserved0;
};

// quantize_activations_fp8(): each 128-wide K block of each row to E4M3 with one fp32 scale
// (DeepSeek-V3's 1x128 activations: scale = amax / 448 over the block's finite values, 1 for an
// all-zero block), scales K-block-major as the FP8 grouped GEMM reads them.
struct QuantizeFp8Params {
  const void* input;       // [rows, k], bf16, f16 or f32
  unsigned char* output;   // [rows, k] E4M3 codes
  float* scales;           // [ceil(k / 128)][rows]
  const int* gather_rows;  // null, or [rows]: output row r reads input row gather_rows[r]
  long long num_tokens;    // input rows when gathering (an index outside [0, num_tokens): a zero row)
  const int* row_of_slot;  // null, or [rows][top_k]: input row t goes to output rows row_of_slot[t][j] >= 0
  long long out_rows;      // rows of the output and scales: rows, or (row_of_slot) the routed rows
  int top_k;
  int reserved0;
  long long rows;
  long long blocks;        // rows * ceil(k / 128): one warp each
  int k;                   // a multiple of 16
  int k_blocks;            // ceil(k / 128)
};

}  // namespace moejit
