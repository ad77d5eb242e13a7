package io.jccl.examples;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link ParameterServerTrainingExample} briefly: the digits classifier learns through the parameter server. */
class ParameterServerTrainingExampleTest {
    @ParameterizedTest
    @CsvSource({"shm0, sgd, -1", "tcp0, adam, 2"})
    void shouldTrainTheDigitsClassifierThroughTheParameterServer(String device, String optimizer, int staleness)
        throws Exception {
        String report = ParameterServerTrainingExample.runAll(device,
            new ParameterServerTrainingExample.Settings(2, 2, 5, optimizer, staleness));
        Matcher m = Pattern.compile("final test accuracy ([0-9.]+)%").matcher(report);
        assertTrue(m.find(), report);
        // 5 epochs: well above chance (10%); the full 30 epochs reach the demo's ~97% (docs/services.md).
        assertTrue(Double.parseDouble(m.group(1)) >= 85, report);
    }
}
