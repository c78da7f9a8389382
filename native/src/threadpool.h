// A persistent pool of worker threads that runs one parallel loop at a time, synchronously: the calling
// thread takes part and returns when every task is done. Not a task queue, not async.
#pragma once
#include <functional>

namespace sfx {

// Number of threads used by parallelFor (the caller included). Default: SINKFLEX_THREADS, else the cores.
int poolThreads();
// Changes the number of threads (1..256); the workers are restarted.
void setPoolThreads(int n);
// Runs fn(task) for task in [0, nTasks) across the pool; returns when all have finished.
// Called from inside a task, it runs serially.
void parallelFor(int nTasks, const std::function<void(int)>& fn);

}  // namespace sfx
