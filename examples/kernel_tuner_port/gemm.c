/* C = alpha * A * B + beta * C for square row-major float matrices of size N (-DN=...), on the
 * CPU: the C counterpart of gemm.cu for kernel_tuner_script_c.py.
 *
 * Tunable at compile time:
 *   tile_i, tile_j, tile_k  cache tile sizes along rows of C, columns of C, and the sum
 *   unroll_j                how many columns of C the innermost loop updates per step
 */
#ifndef N
#error "N (matrix size) must be defined"
#endif

void gemm(float *restrict c, const float *restrict a, const float *restrict b, float alpha, float beta)
{
    for (int i = 0; i < N * N; i++)
        c[i] *= beta;
    for (int ii = 0; ii < N; ii += tile_i)
        for (int kk = 0; kk < N; kk += tile_k)
            for (int jj = 0; jj < N; jj += tile_j)
                for (int i = ii; i < ii + tile_i && i < N; i++)
                    for (int k = kk; k < kk + tile_k && k < N; k++) {
                        const float aik = alpha * a[i * N + k];
                        const float *brow = &b[k * N];
                        float *crow = &c[i * N];
                        int j = jj;
                        const int jend = (jj + tile_j < N) ? jj + tile_j : N;
                        for (; j + unroll_j <= jend; j += unroll_j)
                            for (int u = 0; u < unroll_j; u++)
                                crow[j + u] += aik * brow[j + u];
                        for (; j < jend; j++)
                            crow[j] += aik * brow[j];
                    }
}
