import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Fills the live cluster with a given number of closed ledgers, written by BookKeeper's own client, and exits: the
 * ledgers the tests damage, written in seconds where the kit's Writer (one synchronous add at a time, for a time)
 * takes tens of them.
 *
 * Usage: java -cp LIVEBK_LIB/*:CLASSES LedgerFill METADATA_SERVICE_URI LEDGERS SEED [SIDE_BY_SIDE [half|none|all]]
 * Ledgers as the kit's Writer makes them (ensemble 3, write quorum 2 or 3 in turn, ack quorum 2, digests CRC32,
 * CRC32C, MAC and DUMMY in turn, the kit's password), SIDE_BY_SIDE (default 4) at a time with their adds
 * interleaved and pipelined (so each entry log holds records of several, in the order the bookie got them), 20-120
 * entries each of 100 B-16 KiB, one in eight up to 64 KiB. After each ledger is closed, one of the older ones (never
 * the two newest) is deleted half the time, so garbage collection and compaction rewrite logs ("half", the default);
 * with "none", none is (every log stays full of live records, and is not compacted); with "all", every one is once
 * all are written (their records only push the entry logs past the ledgers written before). Prints a line per
 * ledger closed ("ledger=ID ...") and per ledger deleted ("deleted=ID"), then a "DONE ..." line.
 */
public class LedgerFill {
    private static final DigestType[] DIGESTS = {DigestType.CRC32, DigestType.CRC32C, DigestType.MAC, DigestType.DUMMY};
    private static final int IN_FLIGHT = 32;

    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setAddEntryTimeout(30);
        int ledgers = Integer.parseInt(args[1]);
        Random rnd = new Random(Long.parseLong(args[2]));
        int sideBySide = args.length > 3 ? Integer.parseInt(args[3]) : 4;
        String deletes = args.length > 4 ? args[4] : "half";
        if (!List.of("half", "none", "all").contains(deletes)) {
            throw new IllegalArgumentException("deletes: half, none or all, not " + deletes);
        }
        byte[] password = "livebk".getBytes(StandardCharsets.UTF_8);
        List<Long> closed = new ArrayList<>();
        long entries = 0;
        long bytes = 0;
        int deleted = 0;
        try (BookKeeper bk = new BookKeeper(conf)) {
            for (int made = 0; made < ledgers; made += sideBySide) {
                int batch = Math.min(sideBySide, ledgers - made);
                LedgerHandle[] handles = new LedgerHandle[batch];
                int[] counts = new int[batch];
                for (int i = 0; i < batch; i++) {
                    int n = made + i;
                    handles[i] = bk.createLedger(3, n % 2 == 0 ? 2 : 3, 2, DIGESTS[n % DIGESTS.length], password);
                    counts[i] = 20 + rnd.nextInt(101);
                }
                Semaphore window = new Semaphore(IN_FLIGHT);
                AtomicReference<Integer> failed = new AtomicReference<>();
                List<CompletableFuture<Void>> adds = new ArrayList<>();
                for (int entry = 0; entry < 120; entry++) {
                    for (int i = 0; i < batch; i++) {
                        if (entry >= counts[i]) {
                            continue;
                        }
                        int size = 100 + rnd.nextInt((rnd.nextInt(8) == 0 ? 64 : 16) * 1024 - 100 + 1);
                        byte[] data = new byte[size];
                        rnd.nextBytes(data);
                        bytes += size;
                        window.acquire();
                        CompletableFuture<Void> done = new CompletableFuture<>();
                        adds.add(done);
                        // a ledger's adds complete in order, so its entry ids follow the order they were sent in
                        handles[i].asyncAddEntry(data, (rc, lh, entryId, ctx) -> {
                            if (rc != BKException.Code.OK) {
                                failed.compareAndSet(null, rc);
                            }
                            window.release();
                            done.complete(null);
                        }, null);
                    }
                }
                CompletableFuture.allOf(adds.toArray(new CompletableFuture[0])).get();
                if (failed.get() != null) {
                    throw BKException.create(failed.get());
                }
                for (int i = 0; i < batch; i++) {
                    handles[i].close();
                    entries += counts[i];
                    closed.add(handles[i].getId());
                    System.out.printf("ledger=%d digest=%s ens=3 wq=%d aq=2 entries=%d%n", handles[i].getId(),
                            handles[i].getLedgerMetadata().getDigestType(), handles[i].getLedgerMetadata()
                                    .getWriteQuorumSize(), counts[i]);
                    if (deletes.equals("half") && closed.size() > 2 && rnd.nextBoolean()) {
                        long victim = closed.remove(rnd.nextInt(closed.size() - 2));
                        bk.deleteLedger(victim);
                        deleted++;
                        System.out.printf("deleted=%d%n", victim);
                    }
                }
            }
            if (deletes.equals("all")) {
                for (long victim : closed) {
                    bk.deleteLedger(victim);
                    deleted++;
                    System.out.printf("deleted=%d%n", victim);
                }
                closed.clear();
            }
        }
        System.out.printf("DONE created=%d deleted=%d live=%d entries=%d MB=%.1f%n",
                ledgers, deleted, closed.size(), entries, bytes / 1048576.0);
        System.exit(0); // the client's non-daemon threads would keep the JVM alive
    }
}
