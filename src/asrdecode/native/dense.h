// Dense pieces of the transducer networks that the native searches run themselves (greedy in
// transducer_greedy_lstm.cpp, modified beam in transducer_modified_beam.cpp): the matrix product every
// step is made of, an LSTM prediction network step over chosen rows, and icefall's stateless decoder
// before its projection, with the elementwise pieces of the joint (activation, argmax, log-sum-exp,
// log-softmax). Row-major float32 throughout; shapes in each comment. Vectorised (AVX2 + FMA, the
// product also AVX-512) where the CPU has it, portable code otherwise (dense.cpp).
#pragma once

#include <vector>

namespace asrd {

// An L-layer LSTM prediction network (first layer's input projection as a per-label table
// [V, 4P], whh0 [4P, P], upper layers wup [L-1, 4P, 2P] / bup [L-1, 4P]) followed by the joint's
// decoder projection wdec [H, P] / bdec [H] and its output layer wout [O, H] / bout [O]
// (act 0 tanh, 1 relu).
struct Net {
    const float* table; const float* whh0; int P; int L;
    const float* wup; const float* bup;
    const float* wdec; const float* bdec; int H;
    const float* wout; const float* bout; int O; int act;
};

// Y[a, n] = (b ? b[n] : 0) + W[n, :] . X[a, :]   for a < A   (W [N, K], X [A, K], Y [A, N]). Each
// Y[a, n] is computed the same way whatever A and a are (row results never depend on the batch).
void matmat(const float* W, const float* b, const float* X, int A, int N, int K, float* Y);

// The time of a product of `rows` rows relative to one row at the product's peak rate (a lone row is
// bound by reading the weights: up to 4 units; 12 rows: 12), for the kernels this CPU runs.
double product_cost(int rows);

// The joint's hidden row z [H] = act(e [H] + g [H]) (act 0 tanh, 1 relu).
void joint_hidden(const float* e, const float* g, int H, int act, float* z);

// One LSTM cell update from the pre-activations gates [4P] (blocks i, f, g, o): c [P], h [P] in place.
void lstm_cell(const float* gates, int P, float* c, float* h);

// The first index of the largest of x [n] (n >= 1).
int argmax_first(const float* x, int n);

// log(sum_v exp(x[v] - mx)) over x [n] (mx: its maximum); the log-softmax of the argmax is -this.
double log_sum_exp(const float* x, int n, float mx);

// The log-softmax of x [n] (n >= 1) in float32: out[v] = (x[v] - max) - log(sum exp(x - max)), with the
// polynomial exp (not transducer_common.h's log_softmax, which sums as torch does for the ALSD++ engine).
void fast_log_softmax(const float* x, int n, float* out);

// One LSTM step for the rows `rows` of a batch fed the labels `labels`: h, c [B, L, P] updated in
// place for those rows, g [B, H] their projected decoder output. X, Gt, Hg: scratch.
void predict_rows(const Net& n, const std::vector<int>& rows, const std::vector<int>& labels, float* h, float* c,
                  float* g, std::vector<float>& X, std::vector<float>& Gt, std::vector<float>& Hg);

// icefall's stateless decoder before its projection: x_k = emb[y_k] (zeros for y_k < 0) for the C
// context labels ctx, a grouped convolution (convw [E, E/G, C], convb [E] or null) over them, relu
// -> mid [E]. x: scratch.
void stateless_mid(const int* ctx, int C, const float* emb, int E, const float* convw, const float* convb, int G,
                   std::vector<float>& x, float* mid);

}  // namespace asrd
