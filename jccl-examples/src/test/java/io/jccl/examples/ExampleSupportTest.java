package io.jccl.examples;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The examples recognise every launcher JCCL itself recognises, not only JCCL's and torchrun's variables. */
class ExampleSupportTest {
    @Test
    void shouldRecogniseEveryLauncher() {
        assertTrue(ExampleSupport.launched(Map.of("JCCL_RANK", "1")));
        assertTrue(ExampleSupport.launched(Map.of("RANK", "0")));
        assertTrue(ExampleSupport.launched(Map.of("OMPI_COMM_WORLD_RANK", "3")));
        assertTrue(ExampleSupport.launched(Map.of("SLURM_PROCID", "2")));
        assertTrue(ExampleSupport.launched(Map.of("JOB_COMPLETION_INDEX", "0")));
        assertFalse(ExampleSupport.launched(Map.of("HOME", "/root")));
    }
}
