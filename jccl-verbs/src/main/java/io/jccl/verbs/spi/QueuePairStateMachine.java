package io.jccl.verbs.spi;

import io.jccl.verbs.QueuePairAttribute;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.VerbsException;

import java.util.EnumSet;
import java.util.Set;

import static io.jccl.verbs.QueuePairAttribute.ACCESS_FLAGS;
import static io.jccl.verbs.QueuePairAttribute.ADDRESS_VECTOR;
import static io.jccl.verbs.QueuePairAttribute.ALTERNATE_PATH;
import static io.jccl.verbs.QueuePairAttribute.CURRENT_STATE;
import static io.jccl.verbs.QueuePairAttribute.DEST_QPN;
import static io.jccl.verbs.QueuePairAttribute.ENABLE_SQD_ASYNC_NOTIFY;
import static io.jccl.verbs.QueuePairAttribute.MAX_DEST_RD_ATOMIC;
import static io.jccl.verbs.QueuePairAttribute.MAX_QP_RD_ATOMIC;
import static io.jccl.verbs.QueuePairAttribute.MIN_RNR_TIMER;
import static io.jccl.verbs.QueuePairAttribute.PATH_MIGRATION_STATE;
import static io.jccl.verbs.QueuePairAttribute.PATH_MTU;
import static io.jccl.verbs.QueuePairAttribute.PKEY_INDEX;
import static io.jccl.verbs.QueuePairAttribute.PORT;
import static io.jccl.verbs.QueuePairAttribute.RETRY_COUNT;
import static io.jccl.verbs.QueuePairAttribute.RNR_RETRY;
import static io.jccl.verbs.QueuePairAttribute.RQ_PSN;
import static io.jccl.verbs.QueuePairAttribute.SQ_PSN;
import static io.jccl.verbs.QueuePairAttribute.STATE;
import static io.jccl.verbs.QueuePairAttribute.TIMEOUT;

/**
 * The reliable-connected rows of the kernel's {@code qp_state_table} (drivers/infiniband/core/verbs.c), which is
 * what ibv_modify_qp(3) documents: for each (current, next) state pair, whether the transition exists, which
 * attributes it requires and which it also allows. Any other attribute makes the transition invalid, and an
 * invalid call changes nothing.
 */
public final class QueuePairStateMachine {
    private record Rule(Set<QueuePairAttribute> required, Set<QueuePairAttribute> optional) {
    }

    private static final int N = QueuePairState.values().length;
    private static final Rule[][] RULES = new Rule[N][N];

    static {
        Set<QueuePairAttribute> none = EnumSet.noneOf(QueuePairAttribute.class);
        for (QueuePairState from : QueuePairState.values()) {
            // Every state may go to RESET and to ERR with nothing but the state.
            rule(from, QueuePairState.RESET, none, none);
            rule(from, QueuePairState.ERROR, none, none);
        }
        rule(QueuePairState.RESET, QueuePairState.INIT, EnumSet.of(PKEY_INDEX, PORT, ACCESS_FLAGS), none);
        rule(QueuePairState.INIT, QueuePairState.INIT, none, EnumSet.of(PKEY_INDEX, PORT, ACCESS_FLAGS));
        rule(QueuePairState.INIT, QueuePairState.READY_TO_RECEIVE,
            EnumSet.of(ADDRESS_VECTOR, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER),
            EnumSet.of(ALTERNATE_PATH, ACCESS_FLAGS, PKEY_INDEX));
        rule(QueuePairState.READY_TO_RECEIVE, QueuePairState.READY_TO_SEND,
            EnumSet.of(SQ_PSN, MAX_QP_RD_ATOMIC, RETRY_COUNT, RNR_RETRY, TIMEOUT),
            EnumSet.of(CURRENT_STATE, ALTERNATE_PATH, ACCESS_FLAGS, MIN_RNR_TIMER, PATH_MIGRATION_STATE));
        rule(QueuePairState.READY_TO_SEND, QueuePairState.READY_TO_SEND, none,
            EnumSet.of(CURRENT_STATE, ACCESS_FLAGS, ALTERNATE_PATH, PATH_MIGRATION_STATE, MIN_RNR_TIMER));
        rule(QueuePairState.READY_TO_SEND, QueuePairState.SEND_QUEUE_DRAINED, none,
            EnumSet.of(ENABLE_SQD_ASYNC_NOTIFY));
        rule(QueuePairState.SEND_QUEUE_DRAINED, QueuePairState.READY_TO_SEND, none,
            EnumSet.of(CURRENT_STATE, ALTERNATE_PATH, ACCESS_FLAGS, MIN_RNR_TIMER, PATH_MIGRATION_STATE));
        rule(QueuePairState.SEND_QUEUE_DRAINED, QueuePairState.SEND_QUEUE_DRAINED, none,
            EnumSet.of(ADDRESS_VECTOR, ALTERNATE_PATH, ACCESS_FLAGS, PKEY_INDEX, MIN_RNR_TIMER,
                PATH_MIGRATION_STATE, MAX_QP_RD_ATOMIC, MAX_DEST_RD_ATOMIC, RETRY_COUNT, RNR_RETRY, TIMEOUT, PORT));
        rule(QueuePairState.SEND_QUEUE_ERROR, QueuePairState.READY_TO_SEND, none,
            EnumSet.of(CURRENT_STATE, ACCESS_FLAGS));
    }

    private QueuePairStateMachine() {
    }

    private static void rule(QueuePairState from, QueuePairState to, Set<QueuePairAttribute> required,
                             Set<QueuePairAttribute> optional) {
        RULES[from.ordinal()][to.ordinal()] = new Rule(required, optional);
    }

    /**
     * Checks a modify call against the table and the attribute value ranges.
     *
     * @return the state the QP moves to
     * @throws VerbsException INVALID_ARGUMENT saying what is wrong
     */
    public static QueuePairState validate(QueuePairState current, QueuePairAttributes attributes) {
        Set<QueuePairAttribute> mask = attributes.mask();
        if (mask.contains(CURRENT_STATE) && attributes.currentState() != current) {
            throw invalid("cur_qp_state " + attributes.currentState().shortName() + " given, but the QP is in "
                + current.shortName());
        }
        QueuePairState next = mask.contains(STATE) ? attributes.state() : current;
        Rule rule = RULES[current.ordinal()][next.ordinal()];
        if (rule == null) {
            throw invalid("no transition " + current.shortName() + " -> " + next.shortName()
                + " for a reliable-connected QP");
        }
        EnumSet<QueuePairAttribute> missing = EnumSet.copyOf(rule.required);
        missing.removeAll(mask);
        if (!missing.isEmpty()) {
            throw invalid(current.shortName() + " -> " + next.shortName() + " requires " + rule.required
                + "; missing " + missing);
        }
        EnumSet<QueuePairAttribute> extra = EnumSet.copyOf(mask);
        extra.remove(STATE);
        extra.removeAll(rule.required);
        extra.removeAll(rule.optional);
        if (!extra.isEmpty()) {
            throw invalid(current.shortName() + " -> " + next.shortName() + " does not accept " + extra
                + " (allowed: required " + rule.required + ", optional " + rule.optional + ")");
        }
        checkRanges(attributes);
        return next;
    }

    private static void checkRanges(QueuePairAttributes a) {
        if (a.has(PORT) && a.port() != 1) {
            throw invalid("port_num " + a.port() + " does not exist (the device has port 1)");
        }
        if (a.has(PKEY_INDEX) && (a.pkeyIndex() < 0 || a.pkeyIndex() > 63)) {
            throw invalid("pkey_index " + a.pkeyIndex() + " outside 0..63");
        }
        if (a.has(ACCESS_FLAGS) && (a.accessFlags() & ~0xF) != 0) {
            throw invalid("unknown qp_access_flags bits 0x" + Integer.toHexString(a.accessFlags()));
        }
        if (a.has(RETRY_COUNT) && (a.retryCount() < 0 || a.retryCount() > 7)) {
            throw invalid("retry_cnt " + a.retryCount() + " outside 0..7");
        }
        if (a.has(RNR_RETRY) && (a.rnrRetry() < 0 || a.rnrRetry() > 7)) {
            throw invalid("rnr_retry " + a.rnrRetry() + " outside 0..7");
        }
        if (a.has(TIMEOUT) && (a.timeout() < 0 || a.timeout() > 31)) {
            throw invalid("timeout " + a.timeout() + " outside 0..31");
        }
        if (a.has(MIN_RNR_TIMER) && (a.minRnrTimer() < 0 || a.minRnrTimer() > 31)) {
            throw invalid("min_rnr_timer " + a.minRnrTimer() + " outside 0..31");
        }
        if (a.has(RQ_PSN) && (a.rqPsn() & ~0xFFFFFF) != 0) {
            throw invalid("rq_psn is a 24-bit value");
        }
        if (a.has(SQ_PSN) && (a.sqPsn() & ~0xFFFFFF) != 0) {
            throw invalid("sq_psn is a 24-bit value");
        }
        if (a.has(DEST_QPN) && (a.destQpNumber() & ~0xFFFFFF) != 0) {
            throw invalid("dest_qp_num is a 24-bit value");
        }
        if (a.has(MAX_QP_RD_ATOMIC) && (a.maxRdAtomic() < 0 || a.maxRdAtomic() > 255)) {
            throw invalid("max_rd_atomic " + a.maxRdAtomic() + " outside 0..255");
        }
        if (a.has(MAX_DEST_RD_ATOMIC) && (a.maxDestRdAtomic() < 0 || a.maxDestRdAtomic() > 255)) {
            throw invalid("max_dest_rd_atomic " + a.maxDestRdAtomic() + " outside 0..255");
        }
        if (a.has(ADDRESS_VECTOR) && a.remote() == null) {
            throw invalid("ah_attr (remote endpoint) is null");
        }
        if (a.has(PATH_MTU) && a.pathMtu() == null) {
            throw invalid("path_mtu is null");
        }
        if (a.has(STATE) && a.state() == null) {
            throw invalid("qp_state is null");
        }
    }

    private static VerbsException invalid(String message) {
        return new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "ibv_modify_qp: " + message);
    }
}
