import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.channel.nio.NioEventLoopGroup;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.common.util.OrderedExecutor;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.BookieClientImpl;
import org.apache.bookkeeper.proto.BookieProtocol;
import org.apache.bookkeeper.proto.checksum.DigestManager;
import org.apache.bookkeeper.stats.NullStatsLogger;

/**
 * The client's view of a ledger's copies: every entry of each given ledger read straight from every
 * bookie its current metadata names for that entry, bookie by bookie, in entry order (so a bookie's
 * read-ahead is exercised as a reading client exercises it), each checked with BookKeeper's own
 * DigestManager.
 *
 * Usage: java -cp LIVEBK_LIB/*:CLASSES ReadEveryCopy METADATA_SERVICE_URI LEDGER_ID...
 * Prints one tab-separated line per copy:
 *   copy LEDGER BOOKIE ENTRY RC DIGEST SHA256
 * (RC 0 is a successful read; DIGEST is ok, bad or -; SHA256 is of the payload, - when unread), then
 * per ledger "ledger LEDGER STATE LAST_ENTRY" first, or "ledger LEDGER deleted".
 */
public class ReadEveryCopy {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setReadEntryTimeout(30);
        NioEventLoopGroup group = new NioEventLoopGroup(1);
        OrderedExecutor executor = OrderedExecutor.newBuilder().name("read-every-copy").numThreads(1).build();
        ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
        try (BookKeeper bk = new BookKeeper(conf)) {
            // Bookies reached through their registrations, as the client reaches them (custom bookie ids too).
            BookieClientImpl client = new BookieClientImpl(conf, group, ByteBufAllocator.DEFAULT, executor, scheduler,
                    NullStatsLogger.INSTANCE, bk.getBookieAddressResolver());
            try {
                for (int i = 1; i < args.length; i++) {
                    readLedger(bk, client, Long.parseLong(args[i]));
                }
            } finally {
                client.close();
            }
        } finally {
            executor.shutdown();
            scheduler.shutdown();
            group.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        }
        System.out.flush();
        System.exit(0);
    }

    private static void readLedger(BookKeeper bk, BookieClientImpl client, long ledgerId) throws Exception {
        LedgerMetadata md;
        try {
            md = bk.getLedgerManager().readLedgerMetadata(ledgerId).get().getValue();
        } catch (Exception e) {
            System.out.printf("ledger\t%d\tdeleted%n", ledgerId);
            return;
        }
        System.out.printf("ledger\t%d\t%s\t%d%n", ledgerId, md.getState(), md.getLastEntryId());
        if (!md.isClosed()) {
            return;
        }
        DigestManager digests = DigestManager.instantiate(ledgerId, md.getPassword(),
                BookKeeper.DigestType.toProtoDigestType(BookKeeper.DigestType.fromApiDigestType(md.getDigestType())),
                ByteBufAllocator.DEFAULT, false);
        List<Long> starts = new ArrayList<>(md.getAllEnsembles().keySet());
        int e = md.getEnsembleSize();
        int wq = md.getWriteQuorumSize();
        // bookie -> the entries it must hold, ascending
        Map<BookieId, List<Long>> owed = new java.util.LinkedHashMap<>();
        for (int s = 0; s < starts.size(); s++) {
            long first = starts.get(s);
            long last = s + 1 < starts.size() ? Math.min(starts.get(s + 1) - 1, md.getLastEntryId()) : md.getLastEntryId();
            List<BookieId> ensemble = md.getAllEnsembles().get(first);
            for (long entry = first; entry <= last; entry++) {
                for (int k = 0; k < wq; k++) {
                    BookieId bookie = ensemble.get((int) ((entry + k) % e));
                    owed.computeIfAbsent(bookie, b -> new ArrayList<>()).add(entry);
                }
            }
        }
        for (Map.Entry<BookieId, List<Long>> share : owed.entrySet()) {
            for (long entry : share.getValue()) {
                readCopy(client, digests, ledgerId, share.getKey(), entry);
            }
        }
    }

    private static void readCopy(BookieClientImpl client, DigestManager digests, long ledgerId, BookieId bookie,
                                 long entry) throws Exception {
        CompletableFuture<Object[]> reply = new CompletableFuture<>();
        client.readEntry(bookie, ledgerId, entry, (rc, lid, eid, buffer, ctx) -> {
            byte[] data = null;
            if (rc == 0 && buffer != null) {
                data = new byte[buffer.readableBytes()];
                buffer.getBytes(buffer.readerIndex(), data);
            }
            reply.complete(new Object[] {rc, data});
        }, null, BookieProtocol.FLAG_NONE);
        Object[] got = reply.get(60, TimeUnit.SECONDS);
        int rc = (Integer) got[0];
        byte[] data = (byte[]) got[1];
        String digest = "-";
        String sha = "-";
        if (rc == 0 && data != null) {
            try {
                ByteBuf payload = digests.verifyDigestAndReturnData(entry, Unpooled.wrappedBuffer(data));
                byte[] bytes = new byte[payload.readableBytes()];
                payload.getBytes(payload.readerIndex(), bytes);
                digest = "ok";
                sha = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
            } catch (Exception ex) {
                digest = "bad";
            }
        }
        System.out.printf("copy\t%d\t%s\t%d\t%d\t%s\t%s%n", ledgerId, bookie, entry, rc, digest, sha);
    }
}
