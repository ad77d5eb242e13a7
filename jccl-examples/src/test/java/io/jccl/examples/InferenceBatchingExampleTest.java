package io.jccl.examples;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link InferenceBatchingExample} over shm0 and tcp0, as docs/services.md tells users to. */
class InferenceBatchingExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldServeTheDigitsModelThroughTheRing(String device) throws Exception {
        String report = InferenceBatchingExample.run(device, 3, 60, 8, new int[] {4, 8}, 2000);
        Matcher m = Pattern.compile("served accuracy ([0-9.]+)").matcher(report);
        assertTrue(m.find(), report);
        assertTrue(Double.parseDouble(m.group(1)) > 0.8, "a trained model answers most digits right: " + report);
        assertTrue(report.contains("180 requests in"), report);
    }
}
