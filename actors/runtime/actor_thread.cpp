// ActorThread: runs an io_context on a dedicated thread and joins it with a deadline.
#include "actors/runtime/actor_thread.h"

#include <boost/asio/co_spawn.hpp>
#include <cstdio>
#include <exception>

namespace pagedserve::actors::runtime {

ActorThread::ActorThread(std::string name)
    : name_(std::move(name)), work_(io_.get_executor()), ran_future_(ran_.get_future()) {}

ActorThread::~ActorThread() { join_until(std::chrono::steady_clock::now()); }

void ActorThread::spawn(boost::asio::awaitable<void> loop) {
  boost::asio::co_spawn(io_, std::move(loop), [name = name_](std::exception_ptr error) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pagedserve: the %s actor's loop failed: %s\n", name.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "pagedserve: the %s actor's loop failed\n", name.c_str());
    }
  });
}

void ActorThread::start() {
  thread_ = std::thread([this] {
    try {
      io_.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pagedserve: the %s thread stopped: %s\n", name_.c_str(), e.what());
    }
    ran_.set_value();
  });
}

void ActorThread::join_until(std::chrono::steady_clock::time_point deadline) {
  work_.reset();
  if (!thread_.joinable()) return;
  if (ran_future_.wait_until(deadline) != std::future_status::ready) {
    std::fprintf(stderr, "pagedserve: the %s actor did not stop in time; stopping it\n",
                 name_.c_str());
    io_.stop();
  }
  thread_.join();
}

}  // namespace pagedserve::actors::runtime
