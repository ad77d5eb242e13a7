package io.jccl.transport.roce;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The token bucket against a fixed rate and made-up times. */
class TokenBucketPacerTest {
    /** A controller that holds one rate and counts the bytes it was told about. */
    private static final class FixedRate implements RateController {
        double bps;
        long sentBytes;

        FixedRate(double bps) {
            this.bps = bps;
        }

        @Override
        public void advance(long nowNs) {
        }

        @Override
        public boolean atLineRate() {
            return false;
        }

        @Override
        public double rateBitsPerSecond() {
            return bps;
        }

        @Override
        public void onSent(int bytes, long nowNs) {
            sentBytes += bytes;
        }

        @Override
        public boolean onCnp(long nowNs) {
            bps /= 2;
            return true;
        }

        @Override
        public void onAckRequested(int psn, long nowNs) {
        }

        @Override
        public void onAcknowledged(int psn, long nowNs) {
        }

        @Override
        public void onRetransmit() {
        }
    }

    @Test
    void shouldLetABurstThroughThenPaceAtTheRate() {
        FixedRate rate = new FixedRate(8e9); // 1 byte/ns: the bucket holds 200 µs = 200,000 bytes
        TokenBucketPacer pacer = new TokenBucketPacer(rate, 0);
        for (int i = 0; i < 201; i++) {
            assertEquals(0, pacer.delayNs(0, 1000), "packet " + i); // the 201st takes the bucket to -1000
        }
        assertEquals(1000, pacer.delayNs(0, 1000));
        assertEquals(500, pacer.delayNs(500, 1000));
        assertEquals(0, pacer.delayNs(1000, 1000));
        assertEquals(202_000, rate.sentBytes); // only packets that left are counted
        // a CNP halves the rate: the debt of 1000 bytes takes 2000 ns to repay
        pacer.onCnp(1000);
        assertEquals(2000, pacer.delayNs(1000, 1000));
        assertEquals(0, pacer.delayNs(3000, 1000));
    }

    @Test
    void shouldKeepAtLeastTwoFullPacketsAtLowRates() {
        FixedRate rate = new FixedRate(1e6); // 125 bytes/ms: 200 µs would be 25 bytes
        TokenBucketPacer pacer = new TokenBucketPacer(rate, 0);
        assertEquals(0, pacer.delayNs(0, 4160));
        assertEquals(0, pacer.delayNs(0, 4160));
        assertEquals(0, pacer.delayNs(0, 1)); // bucket exactly empty
        // 1 byte of debt at 1 Mb/s = 8000 ns
        assertEquals(8000, pacer.delayNs(0, 1));
    }
}
