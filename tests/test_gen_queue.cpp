// The server's generation queue on its own, in the order of events that a load test hit
// about one run in ten: the running request ends and, before the next one in line has woken
// up to its turn, a new request arrives. The turn must pass at once, so the newcomer sees
// one running and max_waiting waiting, never nothing running and one waiter too many.
#include <doctest/doctest.h>

#include "apps/server/gen_queue.h"

using flashspec::server::GenerationQueue;

TEST_CASE("generation queue: the turn passes at once, so the bound holds while the next ticket wakes up") {
  GenerationQueue q(2);
  auto a = q.enter();  // idle server: the turn is a's at once
  REQUIRE(a.ticket);
  CHECK(q.counts().running);
  CHECK(q.counts().waiting == 0);
  CHECK(q.wait_turn(*a.ticket, {}) == GenerationQueue::Wait::Turn);
  CHECK(a.ticket->has_turn());

  auto b = q.enter();
  auto c = q.enter();
  REQUIRE(b.ticket);
  REQUIRE(c.ticket);
  CHECK(q.counts().waiting == 2);
  auto refused = q.enter();  // 1 running + 2 waiting
  CHECK_FALSE(refused.ticket);
  CHECK(refused.at_entry.waiting == 2);
  CHECK(refused.at_entry.running);

  a.ticket.reset();  // a's generation ends; b has not called wait_turn yet
  CHECK(q.counts().running);  // b holds the turn already
  CHECK(q.counts().waiting == 1);
  auto d = q.enter();  // room for one: b running, c and d waiting
  REQUIRE(d.ticket);
  auto e = q.enter();
  CHECK_FALSE(e.ticket);
  CHECK(e.at_entry.waiting == 2);
  CHECK(e.at_entry.running);

  CHECK(q.wait_turn(*b.ticket, {}) == GenerationQueue::Wait::Turn);
  // c hangs up while waiting: it leaves without running, d moves up.
  CHECK(q.wait_turn(*c.ticket, [] { return true; }) == GenerationQueue::Wait::Gone);
  c.ticket.reset();
  CHECK(q.counts().waiting == 1);
  b.ticket.reset();
  CHECK(q.wait_turn(*d.ticket, {}) == GenerationQueue::Wait::Turn);

  // A ticket given the turn that leaves before claiming it passes the turn on.
  auto f = q.enter();
  REQUIRE(f.ticket);
  d.ticket.reset();  // f now holds the turn, unclaimed
  f.ticket.reset();
  CHECK_FALSE(q.counts().running);
  CHECK(q.counts().waiting == 0);

  // Shutdown: waiting tickets are told so; nothing new is admitted.
  auto g = q.enter();
  auto h = q.enter();
  CHECK(q.wait_turn(*g.ticket, {}) == GenerationQueue::Wait::Turn);
  q.shutdown();
  CHECK(q.wait_turn(*h.ticket, {}) == GenerationQueue::Wait::ShuttingDown);
  CHECK(q.enter().shutting_down);
}
