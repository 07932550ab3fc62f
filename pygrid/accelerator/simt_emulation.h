/* pygrid SIMT emulation: run generated GPU kernels on the CPU with the host C++ compiler.
 *
 * Included (g++ -include simt_emulation.h -x c++) before a kernel that pygrid
 * generated for CuPy (CUDA/HIP dialect) or for dpctl (OpenCL C dialect), so the
 * very text a GPU compiler would get is compiled and run here, one emulated
 * thread at a time.  It defines only what pygrid's kernels use:
 *
 *   CUDA:   __global__ __device__ __host__ __forceinline__, dim3, threadIdx, blockIdx,
 *           blockDim, gridDim, and SIMT_LAUNCH(blocks, threads, call), the launch loop
 *           standing for  kernel<<<blocks, threads>>>(args).
 *   OpenCL: __kernel __global __local __constant __private restrict, get_global_id,
 *           get_local_id, get_group_id, get_local_size, get_global_size (dimensions
 *           0 and 1), SIMT_LAUNCH as above (a 1-D range of blocks * threads) and
 *           SIMT_LAUNCH_2D(groups, rows, cols, call): work-groups of cols (dimension 0)
 *           by rows (dimension 1) work-items, groups of them along dimension 1; the vector
 *           types floatN, doubleN, uintN and ulongN (N = 2, 4, 8, 16) with + - * / +=,
 *           unary minus, sqrt and comparisons (intN / longN of -1 and 0), initialised from a
 *           scalar, vloadN, vstoreN, shuffle, select and convert_floatN / convert_doubleN /
 *           convert_uintN / convert_ulongN.
 *
 * Threads run in order, block by block, thread by thread: a kernel that needs
 * threads of a block to run concurrently (__syncthreads, barriers) is not
 * supported and does not compile (neither is defined).
 */
#ifndef PYGRID_SIMT_EMULATION_H
#define PYGRID_SIMT_EMULATION_H

#define PYGRID_SIMT_EMULATION 1

/* the math functions that CUDA and OpenCL C have built in, overloaded for float and double */
#include <cmath>
using std::sqrt;

struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* the emulated thread's coordinates; thread_local so that separate host
   threads may run separate launches */
static thread_local dim3 threadIdx(0, 0, 0);
static thread_local dim3 blockIdx(0, 0, 0);
static thread_local dim3 blockDim(1, 1, 1);
static thread_local dim3 gridDim(1, 1, 1);

/* CUDA / HIP qualifiers */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

/* OpenCL C qualifiers and work-item functions (1-D and 2-D launches) */
#define __kernel
#define __global
#define __local
#define __constant const
#define __private
#define restrict __restrict__
#define vec_type_hint(type) /* __attribute__((vec_type_hint(T))): a hint to the OpenCL compiler */
static inline unsigned int simt_pick_(const dim3& v, unsigned int d) { return d == 0 ? v.x : d == 1 ? v.y : v.z; }
static inline long get_local_id(unsigned int d) { return simt_pick_(threadIdx, d); }
static inline long get_group_id(unsigned int d) { return simt_pick_(blockIdx, d); }
static inline long get_local_size(unsigned int d) { return simt_pick_(blockDim, d); }
static inline long get_global_id(unsigned int d) { return get_group_id(d) * get_local_size(d) + get_local_id(d); }
static inline long get_global_size(unsigned int d) { return (long)simt_pick_(gridDim, d) * get_local_size(d); }

/* OpenCL C vector types: N lanes of T, element-wise arithmetic */
template <class T, int N> struct simt_vec_ {
    T v[N];
    simt_vec_() {}
    simt_vec_(T x) { for (int l = 0; l < N; ++l) v[l] = x; }
    simt_vec_& operator+=(const simt_vec_& o) { for (int l = 0; l < N; ++l) v[l] += o.v[l]; return *this; }
    friend simt_vec_ operator+(simt_vec_ a, const simt_vec_& b) { return a += b; }
    friend simt_vec_ operator-(simt_vec_ a, const simt_vec_& b) { for (int l = 0; l < N; ++l) a.v[l] -= b.v[l]; return a; }
    friend simt_vec_ operator*(simt_vec_ a, const simt_vec_& b) { for (int l = 0; l < N; ++l) a.v[l] *= b.v[l]; return a; }
    friend simt_vec_ operator/(simt_vec_ a, const simt_vec_& b) { for (int l = 0; l < N; ++l) a.v[l] /= b.v[l]; return a; }
    friend simt_vec_ operator-(simt_vec_ a) { for (int l = 0; l < N; ++l) a.v[l] = -a.v[l]; return a; }
    friend simt_vec_ sqrt(simt_vec_ a) { for (int l = 0; l < N; ++l) a.v[l] = std::sqrt(a.v[l]); return a; }
};
/* a comparison's result: -1 (true) or 0 in each lane, an integer of the element's size */
template <class T> struct simt_cmp_ { typedef long type; };
template <> struct simt_cmp_<float> { typedef int type; };
#define SIMT_COMPARE_(OP)                                                                        \
    template <class T, int N> static inline simt_vec_<typename simt_cmp_<T>::type, N>          \
    operator OP(const simt_vec_<T, N>& a, const simt_vec_<T, N>& b)                             \
    { simt_vec_<typename simt_cmp_<T>::type, N> r;                                              \
      for (int l = 0; l < N; ++l) r.v[l] = (a.v[l] OP b.v[l]) ? -1 : 0; return r; }
SIMT_COMPARE_(<)
SIMT_COMPARE_(<=)
SIMT_COMPARE_(>)
SIMT_COMPARE_(>=)
SIMT_COMPARE_(==)
SIMT_COMPARE_(!=)
/* select(a, b, c): lane l is b's where c's is negative (its top bit set), else a's */
template <class T, class C, int N> static inline simt_vec_<T, N> select(const simt_vec_<T, N>& a,
                                                                       const simt_vec_<T, N>& b,
                                                                       const simt_vec_<C, N>& c)
{ simt_vec_<T, N> r; for (int l = 0; l < N; ++l) r.v[l] = c.v[l] < 0 ? b.v[l] : a.v[l]; return r; }
/* shuffle(x, mask): lane l of the result is lane mask[l] of x */
template <class T, class M, int N> static inline simt_vec_<T, N> shuffle(const simt_vec_<T, N>& x, const simt_vec_<M, N>& m)
{ simt_vec_<T, N> r; for (int l = 0; l < N; ++l) r.v[l] = x.v[m.v[l] % N]; return r; }
template <int N, class T> static inline simt_vec_<T, N> simt_vload_(long i, const T* p)
{ simt_vec_<T, N> r; for (int l = 0; l < N; ++l) r.v[l] = p[i * N + l]; return r; }
template <int N, class T> static inline void simt_vstore_(const simt_vec_<T, N>& x, long i, T* p)
{ for (int l = 0; l < N; ++l) p[i * N + l] = x.v[l]; }
template <class R, int N, class T> static inline simt_vec_<R, N> simt_convert_(const simt_vec_<T, N>& x)
{ simt_vec_<R, N> r; for (int l = 0; l < N; ++l) r.v[l] = (R)x.v[l]; return r; }
#define SIMT_VECTOR_(N)                                                                          \
    typedef simt_vec_<float, N> float##N;                                                        \
    typedef simt_vec_<double, N> double##N;                                                      \
    typedef simt_vec_<unsigned long, N> ulong##N;                                                \
    typedef simt_vec_<long, N> long##N;                                                          \
    typedef simt_vec_<int, N> int##N;                                                            \
    typedef simt_vec_<unsigned int, N> uint##N;                                                  \
    template <class T> static inline simt_vec_<T, N> vload##N(long i, const T* p) { return simt_vload_<N>(i, p); } \
    template <class T> static inline void vstore##N(const simt_vec_<T, N>& x, long i, T* p) { simt_vstore_<N>(x, i, p); } \
    template <class T> static inline float##N convert_float##N(const simt_vec_<T, N>& x) { return simt_convert_<float>(x); } \
    template <class T> static inline double##N convert_double##N(const simt_vec_<T, N>& x) { return simt_convert_<double>(x); } \
    template <class T> static inline ulong##N convert_ulong##N(const simt_vec_<T, N>& x) { return simt_convert_<unsigned long>(x); } \
    template <class T> static inline uint##N convert_uint##N(const simt_vec_<T, N>& x) { return simt_convert_<unsigned int>(x); }
SIMT_VECTOR_(2)
SIMT_VECTOR_(4)
SIMT_VECTOR_(8)
SIMT_VECTOR_(16)

/* kernel<<<blocks, threads>>>(args)  ==  SIMT_LAUNCH(blocks, threads, kernel(args)) */
#define SIMT_LAUNCH(blocks, threads, call)                                       \
    do {                                                                         \
        gridDim = dim3((unsigned int)(blocks));                                  \
        blockDim = dim3((unsigned int)(threads));                                \
        for (unsigned int b_ = 0; b_ < gridDim.x; ++b_) {                        \
            blockIdx = dim3(b_, 0, 0);                                           \
            for (unsigned int t_ = 0; t_ < blockDim.x; ++t_) {                   \
                threadIdx = dim3(t_, 0, 0);                                      \
                call;                                                            \
            }                                                                    \
        }                                                                        \
    } while (0)

/* an OpenCL 2-D range: global (cols, groups * rows), local (cols, rows) */
#define SIMT_LAUNCH_2D(groups, rows, cols, call)                                 \
    do {                                                                         \
        gridDim = dim3(1, (unsigned int)(groups));                               \
        blockDim = dim3((unsigned int)(cols), (unsigned int)(rows));             \
        for (unsigned int b_ = 0; b_ < gridDim.y; ++b_) {                        \
            blockIdx = dim3(0, b_, 0);                                           \
            for (unsigned int r_ = 0; r_ < blockDim.y; ++r_) {                   \
                for (unsigned int c_ = 0; c_ < blockDim.x; ++c_) {               \
                    threadIdx = dim3(c_, r_, 0);                                 \
                    call;                                                        \
                }                                                                \
            }                                                                    \
        }                                                                        \
    } while (0)

#endif /* PYGRID_SIMT_EMULATION_H */
