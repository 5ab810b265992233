/* The kernels' thread pool (pool.h): natively pthreads, in the threaded WebAssembly flavour Web
 * Workers that share the module's memory and each call engine_thread_main.
 *
 * One job at a time: a caller that finds the pool free writes the job (fn, ctx, parts), then
 * posts it to the helpers taking part, each through its own word (slot_word[s] = the job's
 * generation, never 0). Parts are taken from a shared counter, so any thread may run any part,
 * and a caller that finishes early takes the parts of a helper still waking up; a part's result
 * never depends on which thread ran it. The caller returns when every helper it posted to has
 * acknowledged the job (acks), so no helper reads a job after its caller has returned.
 *
 * Waiting: a short spin (a helper usually gets the next kernel call within microseconds), then
 * the futex (Linux), memory.atomic.wait32 (WebAssembly), or a condition variable elsewhere. A
 * sleeping flag beside each word lets the poster skip the wake-up system call when nobody sleeps.
 * Atomics are the __atomic builtins, sequentially consistent where a flag and a word pair up.
 */
#include "pool.h"
#include "common.h"

#ifndef ENGINE_THREADS

EXPORT int engine_threads(void) { return 1; }
EXPORT int engine_set_threads(int n) {
    (void)n;
    return 1;
}

#else

#include <stdint.h>

#define MAX_THREADS 64
#define SEQ __ATOMIC_SEQ_CST
#define ACQ __ATOMIC_ACQUIRE
#define REL __ATOMIC_RELEASE
#define RLX __ATOMIC_RELAXED

/* spin iterations before sleeping (tuned: long enough to catch the next kernel call of a model
 * without a wake-up, short enough not to burn a shared core for long) */
#ifndef POOL_SPIN
#ifdef __wasm__
#define POOL_SPIN 200000
#else
#define POOL_SPIN 20000
#endif
#endif

#if defined(__wasm__)
static inline void cpu_relax(void) {}
static void wait32(uint32_t *addr, uint32_t value) {
    __builtin_wasm_memory_atomic_wait32((int *)addr, (int)value, -1);
}
static void wake32(uint32_t *addr) { __builtin_wasm_memory_atomic_notify((int *)addr, 0xffffffffu); }
#else
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
static inline void cpu_relax(void) { __builtin_ia32_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void cpu_relax(void) {}
#endif
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
static void wait32(uint32_t *addr, uint32_t value) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, value, (void *)0, (void *)0, 0);
}
static void wake32(uint32_t *addr) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, (void *)0, (void *)0, 0); }
#else /* a futex from one mutex and condition variable: the waker changed *addr before waking */
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cond = PTHREAD_COND_INITIALIZER;
static void wait32(uint32_t *addr, uint32_t value) {
    pthread_mutex_lock(&wait_lock);
    while (__atomic_load_n(addr, SEQ) == value) pthread_cond_wait(&wait_cond, &wait_lock);
    pthread_mutex_unlock(&wait_lock);
}
static void wake32(uint32_t *addr) {
    (void)addr;
    pthread_mutex_lock(&wait_lock);
    pthread_cond_broadcast(&wait_cond);
    pthread_mutex_unlock(&wait_lock);
}
#endif
#endif

/* a word and its sleeping flag on a cache line of their own; a helper's slot also holds the
 * ticket of the job posted to it (its generation until the helper or the caller takes it) */
typedef struct {
    uint32_t word, sleeping, ticket;
    char pad[52];
} signal_line;

/* all zero at start (.bss): one thread, nothing started */
static struct {
    signal_line slot[MAX_THREADS];  /* slot[s].word: the generation posted to helper s (s >= 1) */
    signal_line acks;               /* helpers done with the current job; the caller may sleep on it */
    pool_fn fn;                     /* the job: written before it is posted, read only while unacked */
    void *ctx;
    uint32_t parts;
    uint32_t next;                  /* the next part to take */
    uint32_t generation;
    uint32_t busy;                  /* a caller holds the pool */
    uint32_t wanted;                /* threads asked for, caller included (0: 1) */
    uint32_t started;               /* helpers running: created natively, entered in WebAssembly */
    uint32_t splits;                /* jobs posted to helpers so far (engine_pool_splits) */
    uint32_t posted;                /* helpers the job in flight was posted to */
    uint32_t failed;                /* a helper trapped (WebAssembly): no more splits */
} pool;

static int failed(void) { return (int)__atomic_load_n(&pool.failed, SEQ); }

/* *addr != value, spinning first; returns the new value */
static uint32_t wait_change(signal_line *line, uint32_t value) {
    uint32_t now;
    for (int i = 0; i < POOL_SPIN; ++i) {
        now = __atomic_load_n(&line->word, ACQ);
        if (now != value) return now;
        cpu_relax();
    }
    __atomic_store_n(&line->sleeping, 1, SEQ);
    while ((now = __atomic_load_n(&line->word, SEQ)) == value) wait32(&line->word, value);
    __atomic_store_n(&line->sleeping, 0, RLX);
    return now;
}

static void post(signal_line *line, uint32_t value) {
    __atomic_store_n(&line->word, value, SEQ);
    if (__atomic_load_n(&line->sleeping, SEQ)) wake32(&line->word);
}

static void take_parts(void) {
    for (;;) {
        uint32_t p = __atomic_fetch_add(&pool.next, 1, RLX);
        if (p >= pool.parts) return;
        pool.fn(pool.ctx, p, pool.parts);
    }
}

/* Helper s's life: wait for a job posted to it, take its ticket, take parts, acknowledge. A
 * helper that wakes after its caller ran out of parts finds its ticket taken back (see pool_run)
 * and goes back to waiting: a caller never waits for a helper that has not started. */
static void helper_loop(uint32_t s) {
    uint32_t seen = 0;                  /* slot words start at 0; generations are never 0 */
    for (;;) {
        seen = wait_change(&pool.slot[s], seen);
        uint32_t ticket = seen;
        if (!__atomic_compare_exchange_n(&pool.slot[s].ticket, &ticket, 0, 0, SEQ, RLX)) continue;
        take_parts();
        __atomic_fetch_add(&pool.acks.word, 1, SEQ);
        if (__atomic_load_n(&pool.acks.sleeping, SEQ)) wake32(&pool.acks.word);
    }
}

static uint32_t helpers_in_effect(void) {
    if (failed()) return 0;
    uint32_t wanted = __atomic_load_n(&pool.wanted, RLX), started = __atomic_load_n(&pool.started, ACQ);
    uint32_t helpers = wanted > 1 ? wanted - 1 : 0;
    if (started > MAX_THREADS - 1) started = MAX_THREADS - 1;
    return helpers < started ? helpers : started;
}

static int try_lock(void) {
    uint32_t expected = 0;
    return __atomic_compare_exchange_n(&pool.busy, &expected, 1, 0, ACQ, RLX);
}
static void unlock(void) { __atomic_store_n(&pool.busy, 0, REL); }

#ifndef __wasm__
static void *helper_main(void *arg) {
    helper_loop((uint32_t)(uintptr_t)arg);
    return 0;
}

/* a forked child has the parent's memory but none of its helper threads: start afresh */
static void after_fork_in_child(void) {
    for (int s = 0; s < MAX_THREADS; ++s) pool.slot[s].word = pool.slot[s].sleeping = pool.slot[s].ticket = 0;
    pool.acks.word = pool.acks.sleeping = 0;
    pool.started = 0;
    pool.busy = 0;
}

/* create helpers up to wanted - 1 (holding the pool); stops at the first that fails */
static void start_helpers(void) {
    static int registered;
    if (!registered) registered = pthread_atfork(0, 0, after_fork_in_child) == 0;
    while (pool.started + 1 < pool.wanted) {
        uint32_t s = pool.started + 1;
        pool.slot[s].word = pool.slot[s].sleeping = pool.slot[s].ticket = 0;
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, helper_main, (void *)(uintptr_t)s);
        pthread_attr_destroy(&attr);
        if (failed) {
            pool.wanted = pool.started + 1;
            return;
        }
        __atomic_store_n(&pool.started, s, REL);
    }
}
#endif

static void wait_acks(uint32_t helpers);

void pool_run(size_t parts, pool_fn fn, void *ctx) {
    if (parts <= 1 || !try_lock()) {
        for (size_t p = 0; p < parts; ++p) fn(ctx, p, parts);
        return;
    }
#ifndef __wasm__
    if (pool.started + 1 < pool.wanted) start_helpers();
#endif
    uint32_t helpers = helpers_in_effect();
    if (helpers > parts - 1) helpers = (uint32_t)parts - 1;
    if (helpers == 0) {
        unlock();
        for (size_t p = 0; p < parts; ++p) fn(ctx, p, parts);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.parts = (uint32_t)parts;
    __atomic_store_n(&pool.next, 1, RLX);
    __atomic_store_n(&pool.acks.word, 0, RLX);
    if (++pool.generation == 0) pool.generation = 1;
    __atomic_fetch_add(&pool.splits, 1, RLX);
    pool.posted = helpers;
    for (uint32_t s = 1; s <= helpers; ++s) {                  /* publishes the job */
        __atomic_store_n(&pool.slot[s].ticket, pool.generation, RLX);
        post(&pool.slot[s], pool.generation);
    }
    fn(ctx, 0, parts);
    take_parts();
    for (uint32_t s = 1; s <= helpers; ++s) {       /* no part left: take back the tickets not taken */
        uint32_t ticket = pool.generation;
        if (__atomic_compare_exchange_n(&pool.slot[s].ticket, &ticket, 0, 0, SEQ, RLX))
            __atomic_fetch_add(&pool.acks.word, 1, SEQ);
    }
    wait_acks(helpers);
    unlock();
}

/* until every helper posted to has acknowledged, or one trapped (engine_pool_helper_failed) */
static void wait_acks(uint32_t helpers) {
    int spins = 0;
    while (__atomic_load_n(&pool.acks.word, ACQ) != helpers && !failed() && spins++ < POOL_SPIN) cpu_relax();
    if (__atomic_load_n(&pool.acks.word, ACQ) != helpers && !failed()) {
        __atomic_store_n(&pool.acks.sleeping, 1, SEQ);
        uint32_t acked;
        while ((acked = __atomic_load_n(&pool.acks.word, SEQ)) != helpers && !failed())
            wait32(&pool.acks.word, acked);
        __atomic_store_n(&pool.acks.sleeping, 0, RLX);
    }
}

/* Up to POOL_PARTS_PER_THREAD parts a thread when the work allows: parts are taken as threads
 * come free, so a helper that another process keeps off its core delays the caller by one small
 * part, not by half the work. */
#ifndef POOL_PARTS_PER_THREAD
#define POOL_PARTS_PER_THREAD 4
#endif

size_t pool_parts(size_t units, size_t min_units_per_part) {
    size_t threads = helpers_in_effect() + 1;
    if (threads == 1) return 1;
    size_t most = units / (min_units_per_part ? min_units_per_part : 1), cap = threads * POOL_PARTS_PER_THREAD;
    if (most < 1) return 1;
    return most < cap ? most : cap;
}

EXPORT int engine_threads(void) {
#ifndef __wasm__
    if (pool.started + 1 < pool.wanted && try_lock()) {    /* after a fork: start them again */
        start_helpers();
        unlock();
    }
#endif
    return (int)helpers_in_effect() + 1;
}

/* how many calls have been split among threads so far (not part of the ABI: for tests that check
 * a shape does split) */
EXPORT unsigned engine_pool_splits(void) { return __atomic_load_n(&pool.splits, RLX); }

EXPORT int engine_set_threads(int n) {
    uint32_t wanted = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (uint32_t)n;
    while (!try_lock()) cpu_relax();     /* a running job finishes first */
    __atomic_store_n(&pool.wanted, wanted, RLX);
#ifndef __wasm__
    start_helpers();
#endif
    unlock();
    return (int)helpers_in_effect() + 1;
}

#ifdef __wasm__
/* a helper Web Worker's loop (tid >= 1, for the caller's records): it takes the next free slot,
 * so the helpers taking part are always ones that entered */
EXPORT void engine_thread_main(int tid) {
    (void)tid;
    uint32_t s = __atomic_fetch_add(&pool.started, 1, SEQ) + 1;
    if (s >= MAX_THREADS)                             /* one too many: never posted to */
        for (;;) wait32(&pool.slot[0].word, 0);       /* slot 0 is the caller's: its word stays 0 */
    helper_loop(s);
}

/* The way out of a trap (web/kernel-pool.js calls these). A helper that traps inside a kernel
 * never acknowledges its job: its worker calls engine_pool_helper_failed, which marks the pool
 * failed and changes the acknowledgement word, so a caller waiting there returns (that job's
 * result is void, and engine_pool_failed says so); from then on nothing splits. A caller that
 * traps inside a kernel leaves the pool held: engine_pool_release waits for the helpers it had
 * posted to (their parts run out) and frees it. */
EXPORT void engine_pool_helper_failed(void) {
    __atomic_store_n(&pool.failed, 1, SEQ);
    __atomic_fetch_add(&pool.acks.word, 1u << 24, SEQ);
    wake32(&pool.acks.word);
}

EXPORT int engine_pool_failed(void) { return failed(); }

EXPORT void engine_pool_release(void) {
    if (!__atomic_load_n(&pool.busy, SEQ)) return;
    for (uint32_t s = 1; s <= pool.posted; ++s) {             /* tickets not taken yet */
        uint32_t ticket = pool.generation;
        if (__atomic_compare_exchange_n(&pool.slot[s].ticket, &ticket, 0, 0, SEQ, RLX))
            __atomic_fetch_add(&pool.acks.word, 1, SEQ);
    }
    wait_acks(pool.posted);
    unlock();
}

/* how many helpers have entered engine_thread_main */
EXPORT int engine_threads_ready(void) {
    uint32_t started = __atomic_load_n(&pool.started, ACQ);
    return (int)(started < MAX_THREADS - 1 ? started : MAX_THREADS - 1);
}
#endif

#endif
