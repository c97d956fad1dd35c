// What BookKeeper 4.16.7's own RackawareEnsemblePlacementPolicy chooses to replace a bookie, for the placement tests.
//
// Usage: java ReplaceBookie TOPOLOGY_SCRIPT < scenarios
// One scenario per input line: MIN_RACKS ENFORCE WRITE_QUORUM WRITABLE,... ENSEMBLE,... REPLACED TRIALS
// (bookie ids host:port, resolved as legacy ids). For each, the policy is built as a client builds it from
// these settings (racks from ScriptBasedMapping, networkTopologyScriptFileName), told which bookies are
// writable, and asked TRIALS times for a replacement (it picks at random within a step); one output line:
// CHOICE and the distinct bookies it chose, sorted, or CHOICE NotEnoughBookies.
import io.netty.util.HashedWheelTimer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.feature.SettableFeatureProvider;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.net.BookieSocketAddress;
import org.apache.bookkeeper.stats.NullStatsLogger;

public class ReplaceBookie {
    public static void main(String[] args) throws Exception {
        HashedWheelTimer timer = new HashedWheelTimer();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] f = line.trim().split(" ");
            ClientConfiguration conf = new ClientConfiguration();
            conf.setProperty("networkTopologyScriptFileName", args[0]);
            conf.setMinNumRacksPerWriteQuorum(Integer.parseInt(f[0]));
            conf.setEnforceMinNumRacksPerWriteQuorum(Boolean.parseBoolean(f[1]));
            int writeQuorum = Integer.parseInt(f[2]);
            Set<BookieId> writable = ids(f[3]);
            List<BookieId> ensemble = new ArrayList<>();
            for (String id : f[4].split(",")) {
                ensemble.add(BookieId.parse(id));
            }
            BookieId replaced = BookieId.parse(f[5]);
            RackawareEnsemblePlacementPolicy policy = new RackawareEnsemblePlacementPolicy();
            policy.initialize(conf, Optional.empty(), timer, SettableFeatureProvider.DISABLE_ALL,
                    NullStatsLogger.INSTANCE, BookieSocketAddress.LEGACY_BOOKIEID_RESOLVER);
            policy.onClusterChanged(writable, Collections.emptySet());
            TreeSet<String> chosen = new TreeSet<>();
            try {
                for (int trial = 0; trial < Integer.parseInt(f[6]); trial++) {
                    Set<BookieId> exclude = new HashSet<>(Collections.singleton(replaced));
                    chosen.add(policy.replaceBookie(ensemble.size(), writeQuorum, writeQuorum,
                            Collections.emptyMap(), ensemble, replaced, exclude).getResult().toString());
                }
                System.out.println("CHOICE " + String.join(" ", chosen));
            } catch (BKException.BKNotEnoughBookiesException e) {
                System.out.println("CHOICE NotEnoughBookies");
            }
            policy.uninitalize();
        }
        timer.stop();
    }

    private static Set<BookieId> ids(String list) {
        Set<BookieId> ids = new HashSet<>();
        for (String id : list.split(",")) {
            ids.add(BookieId.parse(id));
        }
        return ids;
    }
}
