/* The kernels' thread pool: an export splits its work into parts that write disjoint outputs,
 * and pool_run runs them on every thread at once.
 *
 * Built with -DENGINE_THREADS natively (pthreads) and in the threaded WebAssembly flavour (Web
 * Workers sharing one memory, each calling engine_thread_main). Without it (the Pyodide side
 * modules) there is one thread: pool_run calls fn directly, so no function pointer is ever taken
 * there (a side module that took one would import a table, which its build check refuses).
 */
#ifndef ENGINE_KERNELS_POOL_H
#define ENGINE_KERNELS_POOL_H

#include <stddef.h>

typedef void (*pool_fn)(void *ctx, size_t part, size_t parts);

#ifdef ENGINE_THREADS
/* fn(ctx, p, parts) for every p < parts, part 0 on the calling thread and the others on the
 * pool's; returns when all are done. A second caller while the pool is busy (natively, Python
 * threads call kernels concurrently: ctypes releases the GIL) runs all its parts itself. */
void pool_run(size_t parts, pool_fn fn, void *ctx);
/* how many parts to cut `units` into: 1 up to the threads in effect, each part at least
 * min_units_per_part units (below that, waking a thread costs more than it saves) */
size_t pool_parts(size_t units, size_t min_units_per_part);
#else
#define pool_run(parts, fn, ctx) ((void)(parts), (fn)((ctx), 0, 1))
static inline size_t pool_parts(size_t units, size_t min_units_per_part) {
    (void)units, (void)min_units_per_part;
    return 1;
}
#endif

/* part p of `count` items cut into `parts` runs as even as possible: [*begin, *end) */
static inline void pool_range(size_t count, size_t part, size_t parts, size_t *begin, size_t *end) {
    *begin = (size_t)((unsigned long long)count * part / parts);     /* 64-bit: no wrap in wasm32 */
    *end = (size_t)((unsigned long long)count * (part + 1) / parts);
}

/* the same in whole multiples of `step` (the last part takes the remainder) */
static inline void pool_range_step(size_t count, size_t step, size_t part, size_t parts, size_t *begin,
                                   size_t *end) {
    size_t steps = (count + step - 1) / step;
    *begin = (size_t)((unsigned long long)steps * part / parts) * step;
    *end = (size_t)((unsigned long long)steps * (part + 1) / parts) * step;
    if (*begin > count) *begin = count;
    if (*end > count) *end = count;
}

#endif
