// The actor runtime's vocabulary on Boost.Asio: bounded typed channels between actors and the
// completion token every actor awaits them with. Include only from actor and runtime .cpp
// files (and actor headers), never from a public header: Asio is slow to compile.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

namespace pagedserve::actors::runtime {

// A bounded, thread-safe, typed mailbox. Senders suspend while it is full (backpressure);
// close() ends every pending and later operation with an error.
template <class Message>
using Channel =
    boost::asio::experimental::concurrent_channel<void(boost::system::error_code, Message)>;

// Expected errors (a closed channel at shutdown) come back as values: co_await
// channel.async_receive(kAwaitTuple) yields std::tuple<error_code, Message>.
inline constexpr auto kAwaitTuple = boost::asio::as_tuple(boost::asio::use_awaitable);

template <class T>
using Task = boost::asio::awaitable<T>;

}  // namespace pagedserve::actors::runtime
