// ActorThread: one OS thread running one io_context, the home of one actor. A single thread
// is the actor's strand: its coroutines interleave only at co_await, so its state needs no
// lock. A work guard keeps run() going while the actor's only pending work is a receive on a
// channel (whose operations may be tracked on another executor) until shutdown releases it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace pagedserve::actors::runtime {

class ActorThread {
 public:
  explicit ActorThread(std::string name);
  ActorThread(const ActorThread&) = delete;
  ActorThread& operator=(const ActorThread&) = delete;
  ~ActorThread();  // join_until(now)

  boost::asio::io_context& context() { return io_; }
  boost::asio::io_context::executor_type executor() { return io_.get_executor(); }

  // Starts a coroutine (the actor's run loop) on this thread's io_context. A loop that ends
  // with an exception is a bug; it is reported on stderr and the actor stops.
  void spawn(boost::asio::awaitable<void> loop);
  void start();
  // Drops the work guard and waits for run() to return, i.e. for every loop to end (their
  // channels should be closed first). Past the deadline the io_context is stopped, which
  // abandons the loops, and the thread is joined. Idempotent.
  void join_until(std::chrono::steady_clock::time_point deadline);

 private:
  const std::string name_;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::promise<void> ran_;
  std::future<void> ran_future_;
  std::thread thread_;
};

}  // namespace pagedserve::actors::runtime
