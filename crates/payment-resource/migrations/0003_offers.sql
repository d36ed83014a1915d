-- Offers: a claimable payout handed to one executor is its alone for a while, so executors
-- side by side take disjoint payouts instead of colliding on the same ones (a collision costs
-- an acquire that waits behind another executor's lock, or gives up). Advisory only: the lock
-- and the fence decide who may write. An offer that lapses (its executor froze, left, or has
-- not started it) goes to the next executor that asks.
ALTER TABLE payouts ADD COLUMN offered_to text;
ALTER TABLE payouts ADD COLUMN offered_until timestamptz;
