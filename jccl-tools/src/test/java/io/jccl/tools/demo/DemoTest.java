package io.jccl.tools.demo;

import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import io.jccl.tools.Main;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The main job end to end (fewer ranks and epochs than the default, to keep the suite short). */
class DemoTest {
    @Test
    void shouldTrainDataParallelAndPassEveryCheck() {
        PrintStream saved = System.out;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int status;
        try {
            System.setOut(new PrintStream(bytes, true, StandardCharsets.UTF_8));
            status = Main.run("demo", "-np", "2", "--epochs", "6");
        } finally {
            System.setOut(saved);
        }
        String text = bytes.toString(StandardCharsets.UTF_8);
        System.out.print(text);
        assertEquals(0, status, text);
        // Bug #10: one summary line for the job (it printed N·(N−1) "Using network" lines) ...
        assertEquals(1, text.lines().filter(l -> l.contains("Using network")).count(), text);
        assertTrue(text.contains("[0] comm 'world' rank 0 nranks 2 localRanks 2 hosts 1 - Using network shm0 ("),
            text);
        assertTrue(text.contains(" for rank 1 - paths "), text);
        // ... and progress while the JIT warms up (it sat silent), each size before the table
        int lastWarmUp = text.indexOf("[0] # JIT warm-up 7/7: 2 MiB x ");
        assertTrue(text.indexOf("[0] # JIT warm-up 1/7: 8 B x ") >= 0 && lastWarmUp > 0, text);
        assertTrue(lastWarmUp < text.indexOf("[0] # JIT warm-up: waiting until the JIT compiler is quiet"), text);
        assertTrue(lastWarmUp < text.indexOf("#       size         count"), text);
        assertTrue(text.contains("weights on all 2 ranks bit-identical: yes"), text);
        assertTrue(text.contains(": match"), text);
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        assertTrue(text.contains("demo: all checks passed"), text);
    }

    @Test
    void shouldSplitEveryBatchAcrossRanksWithoutOverlap() {
        // The shares of ranks 0..n-1 tile each global batch exactly, also when the batch does not divide evenly.
        for (int world = 1; world <= 8; world++) {
            for (int size = 1; size <= 64; size++) {
                int covered = 0;
                int previousEnd = 0;
                for (int rank = 0; rank < world; rank++) {
                    int from = DataParallelTrainer.shareStart(size, rank, world);
                    int to = DataParallelTrainer.shareStart(size, rank + 1, world);
                    assertEquals(previousEnd, from);
                    covered += to - from;
                    previousEnd = to;
                }
                assertEquals(size, covered);
            }
        }
    }

    @Test
    void shouldLearnTheDigits() {
        DigitsDataset data = DigitsDataset.load(297, 7);
        assertEquals(1500, data.trainLabels().length);
        assertEquals(297, data.testLabels().length);
        MultilayerPerceptron model = new MultilayerPerceptron(64, 32, 10, 42);
        new DataParallelTrainer(data, 0, 1, 64, 0.5f, 11).train(model, 3, g -> { }, r -> { });
        assertTrue(model.accuracy(data.testFeatures(), data.testLabels()) > 0.85,
            "three epochs should already classify most digits");
    }
}
