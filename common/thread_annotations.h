// Clang's thread-safety annotations (-Wthread-safety), as in Abseil and LevelDB: they state
// which mutex guards a member, and clang checks the rule where the mutex type is annotated.
// Other compilers read them as nothing.
#pragma once

#if defined(__clang__)
#define MLCD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define MLCD_THREAD_ANNOTATION(x)
#endif

#ifndef GUARDED_BY
// The member is read and written only with `mu` held.
#define GUARDED_BY(mu) MLCD_THREAD_ANNOTATION(guarded_by(mu))
#endif
#ifndef EXCLUSIVE_LOCKS_REQUIRED
// The function is called with `mu` held.
#define EXCLUSIVE_LOCKS_REQUIRED(...) MLCD_THREAD_ANNOTATION(exclusive_locks_required(__VA_ARGS__))
#endif
