// Clang's thread-safety annotations (-Wthread-safety), as in Abseil and LevelDB: they state
// which mutex guards a member and which locks a function needs, and clang checks the rules
// where the mutex type is a capability (mlcd::Mutex, common/mutex.h; std::mutex is not one).
// Other compilers read them as nothing. Each macro is defined only when no other header
// (gRPC's, Abseil's) did first.
#pragma once

#if defined(__clang__)
#define MLCD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define MLCD_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
// The class is a lock (`name` for messages: "mutex").
#define CAPABILITY(name) MLCD_THREAD_ANNOTATION(capability(name))
#endif
#ifndef SCOPED_CAPABILITY
// The class holds a lock from its constructor to its destructor (RAII).
#define SCOPED_CAPABILITY MLCD_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
// The member is read and written only with `mu` held.
#define GUARDED_BY(mu) MLCD_THREAD_ANNOTATION(guarded_by(mu))
#endif
#ifndef PT_GUARDED_BY
// What the pointer member points to is read and written only with `mu` held.
#define PT_GUARDED_BY(mu) MLCD_THREAD_ANNOTATION(pt_guarded_by(mu))
#endif
#ifndef REQUIRES
// The function is called with the locks held (exclusively).
#define REQUIRES(...) MLCD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUSIVE_LOCKS_REQUIRED
// The older name of REQUIRES.
#define EXCLUSIVE_LOCKS_REQUIRED(...) MLCD_THREAD_ANNOTATION(exclusive_locks_required(__VA_ARGS__))
#endif
#ifndef LOCKS_EXCLUDED
// The function is called without the locks (it takes them itself).
#define LOCKS_EXCLUDED(...) MLCD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ACQUIRE
// The function takes the locks (no argument: the object itself) and returns holding them.
#define ACQUIRE(...) MLCD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE_SHARED
// The function takes the locks shared (readers) and returns holding them.
#define ACQUIRE_SHARED(...) MLCD_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_SHARED
// The function releases the locks held shared.
#define RELEASE_SHARED(...) MLCD_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#endif
#ifndef REQUIRES_SHARED
// The function is called with the locks held, shared or exclusively.
#define REQUIRES_SHARED(...) MLCD_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
// The function releases the locks (no argument: the object itself).
#define RELEASE(...) MLCD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
// The function holds the locks when it returns `result` (true or false).
#define TRY_ACQUIRE(...) MLCD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
// The function checks that the lock is held; the analysis assumes it is afterwards.
#define ASSERT_CAPABILITY(x) MLCD_THREAD_ANNOTATION(assert_capability(x))
#endif
#ifndef RETURN_CAPABILITY
// The function returns a reference to the lock `x`.
#define RETURN_CAPABILITY(x) MLCD_THREAD_ANNOTATION(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
// The function is not checked (say why where it is used).
#define NO_THREAD_SAFETY_ANALYSIS MLCD_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
