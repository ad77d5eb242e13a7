package io.jccl.tools.demo;

import io.jccl.tools.Main;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code jccl demo --elastic} end to end (3 epochs to keep the suite short): a rank killed with kill -9, the
 * survivors shrink and train on, a replacement joins and READs the weights, every check passes. Seed 6 kills rank
 * 0, the host of the job's store, so the shrink and the join go through a standby store.
 */
class ElasticDemoTest {
    @Test
    void shouldKeepTrainingThroughAKilledRankAndTakeInAReplacement() {
        PrintStream saved = System.out;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int status;
        try {
            System.setOut(new PrintStream(bytes, true, StandardCharsets.UTF_8));
            status = Main.run("demo", "--elastic", "--epochs", "3", "--seed", "6", "--timeout", "240");
        } finally {
            System.setOut(saved);
        }
        String text = bytes.toString(StandardCharsets.UTF_8);
        System.out.print(text);
        assertEquals(0, status, text);
        assertTrue(text.contains("rank 0 will be killed (kill -9)"), text);
        assertTrue(text.contains("shrank to 3 ranks"), text);
        assertTrue(text.contains("[new] replacement joined as rank 3 of 4; read 2410 weights and step "), text);
        assertTrue(text.contains("weights on all 4 ranks (the replacement included) bit-identical: yes"), text);
        assertTrue(text.contains("difference 0.0 points") || text.contains(": ok"), text);
        assertTrue(text.contains("jccl demo --elastic: all checks passed"), text);
    }
}
