// The persistent thread pool behind parallelFor (see threadpool.h).
#include "threadpool.h"

#include "ftz.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace sfx {
namespace {

thread_local bool tInsideTask = false;

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return nThreads_; }

  void resize(int n) {
    stop();
    start(n);
  }

  void run(int nTasks, const std::function<void(int)>& fn) {
    if (nTasks <= 0) return;
    if (nTasks == 1 || nThreads_ == 1 || tInsideTask) {
      bool was = tInsideTask;
      tInsideTask = true;
      for (int i = 0; i < nTasks; i++) fn(i);
      tInsideTask = was;
      return;
    }
    std::lock_guard<std::mutex> callLock(callMutex_);
    // The call's state is set, and workers join it, under m_ while it is open; the call returns only when
    // every task is done and every worker that joined has left work(), so no worker can take a task of
    // this call after it returns (into the next call's state, or with this call's buffers freed).
    {
      std::lock_guard<std::mutex> lk(m_);
      fn_ = &fn;
      nTasks_ = nTasks;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      open_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    work();
    // Wait for the workers: spin briefly, then yield.
    int spins = 0;
    while (done_.load(std::memory_order_acquire) < nTasks) {
      if (++spins > 2000) std::this_thread::yield();
    }
    {
      std::lock_guard<std::mutex> lk(m_);
      open_ = false;
    }
    while (active_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    fn_ = nullptr;
  }

 private:
  void work() {
    tInsideTask = true;
    for (;;) {
      int i = next_.fetch_add(1, std::memory_order_acq_rel);
      if (i >= nTasks_) break;
      (*fn_)(i);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
    tInsideTask = false;
  }

  void workerLoop() {
    unsigned seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      // Spin a little for back-to-back calls, then sleep.
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen && !quit_.load(std::memory_order_acquire) &&
             spins < 20000) {
        spins++;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen || quit_.load(); });
        if (quit_.load()) return;
        seen = generation_.load(std::memory_order_acquire);
        if (!open_) continue;  // that call has ended; wait for the next
        active_.fetch_add(1, std::memory_order_acq_rel);
      }
      work();
      active_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void start(int n) {
    nThreads_ = n < 1 ? 1 : n;
    quit_.store(false);
    nTasks_ = 0;
    for (int i = 1; i < nThreads_; i++) workers_.emplace_back([this] {
      FlushToZero::setForThread();
      workerLoop();
    });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(m_);
      quit_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  int nThreads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex callMutex_;
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<unsigned> generation_{0};
  std::atomic<bool> quit_{false};
  std::atomic<int> next_{0};
  std::atomic<int> done_{0};
  /** Workers inside work() for the current call. */
  std::atomic<int> active_{0};
  /** Whether the current call still takes workers (guarded by m_). */
  bool open_ = false;
  int nTasks_ = 0;
  const std::function<void(int)>* fn_ = nullptr;
};

int defaultThreads() {
  const char* env = std::getenv("SINKFLEX_THREADS");
  if (env && *env) {
    int n = std::atoi(env);
    if (n >= 1 && n <= 256) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

Pool& pool() {
  static Pool* p = new Pool(defaultThreads());  // never destroyed: workers may outlive static teardown order
  return *p;
}

}  // namespace

int poolThreads() { return pool().size(); }

void setPoolThreads(int n) {
  if (n < 1) n = 1;
  if (n > 256) n = 256;
  if (n != pool().size()) pool().resize(n);
}

void parallelFor(int nTasks, const std::function<void(int)>& fn) { pool().run(nTasks, fn); }

}  // namespace sfx
