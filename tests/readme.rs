//! The README's programs that need features beyond the defaults, complete and run against the
//! sandbox: the README shows excerpts of them (`readme_blocks.rs` checks that every excerpt is
//! here, line for line).

/// "Paid or signed-in buyers": a buyer pays, then comes back signed in with the same wallet.
mod signed_in {
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use axum::{Router, body::Body};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use tower_x402::payment::Payments;
    use tower_x402::{BoxError, Facilitator, Offer, VerifiedPayment, X402Layer};
    use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
    use tower_x402_siwx::{SIGN_IN_WITH_X, SignInWithX, SignedIn};
    use x402_wire::{PAYMENT_REQUIRED, PaymentRequired, ResourceInfo, UsdcDeployment, header};

    /// A buyer who pays now, or who signs in with the wallet that paid before.
    async fn report(
        paid: Option<VerifiedPayment>,
        signed_in: Option<SignedIn>,
    ) -> Result<String, StatusCode> {
        match (paid, signed_in) {
            (Some(paid), _) => Ok(format!(
                "the report, paid by {}",
                paid.payer.unwrap_or_default()
            )),
            (None, Some(buyer)) => Ok(format!("the report again, for {}", buyer.address())),
            // Behind the layer every request is one or the other.
            (None, None) => Err(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    fn app(facilitator: impl Facilitator) -> Result<Router, BoxError> {
        let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .usdc(
                &UsdcDeployment::BASE_SEPOLIA,
                "0.10".parse()?,
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .build()?;
        let sign_in = SignInWithX::new(
            "https://api.example.com",
            b"a secret all instances share 32+",
        )?;
        let payments = Payments::new(facilitator).hook(sign_in);
        let paywall = X402Layer::with_payments(payments, offer);
        let app: Router = Router::new().route("/report", get(report).layer(paywall));
        Ok(app)
    }

    async fn text(response: axum::response::Response) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_buyer_pays_then_signs_in_and_neither_answer_is_a_500() {
        let facilitator = SandboxFacilitator::new();
        let app = app(facilitator.clone()).unwrap();
        let wallet = SandboxWallet::random();

        let request = Request::get("/report").body(Body::empty()).unwrap();
        let unpaid = app.clone().oneshot(request).await.unwrap();
        assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);

        // Paid: `VerifiedPayment` is there.
        let purchase = wallet
            .buy(
                app.clone(),
                Request::get("/report").body(String::new()).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(purchase.response.status(), StatusCode::OK);
        let body = text(purchase.response.map(Body::new)).await;
        let paid_by = format!("the report, paid by {}", wallet.address());
        assert_eq!(body.to_lowercase(), paid_by.to_lowercase());
        assert_eq!(facilitator.settlement_count(), 1);

        // Signed in with the same wallet: `SignedIn` is there, no second payment.
        let challenge = app
            .clone()
            .oneshot(Request::get("/report").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let required: PaymentRequired =
            header::decode(challenge.headers()[PAYMENT_REQUIRED].as_bytes()).unwrap();
        let proof = wallet
            .sign_in(&required.extensions.unwrap()["sign-in-with-x"])
            .unwrap();
        let again = Request::get("/report")
            .header(SIGN_IN_WITH_X, proof)
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(again).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = text(response).await;
        let again_for = format!("the report again, for {}", wallet.address());
        assert_eq!(body.to_lowercase(), again_for.to_lowercase());
        assert_eq!(facilitator.settlement_count(), 1);
    }
}

/// "Browsers": CORS for pages on other origins, and the HTML 402.
mod browsers {
    use axum::Router;
    use axum::body::Body;
    use axum::handler::Handler;
    use axum::http::Request;
    use axum::routing::get;
    use tower::ServiceExt;
    use tower_x402::{Offer, PaywallPage, X402Layer, payment_cors};
    use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
    use x402_wire::{
        PAYMENT_REQUIRED, PAYMENT_SIGNATURE, PaymentRequired, ResourceInfo, UsdcDeployment, header,
    };

    async fn report() -> &'static str {
        "the report"
    }

    #[tokio::test]
    async fn a_page_on_another_origin_pays_and_reads_the_answers()
    -> Result<(), Box<dyn std::error::Error>> {
        let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .usdc(
                &UsdcDeployment::BASE_SEPOLIA,
                "0.10".parse()?,
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .build()?;
        let facilitator = SandboxFacilitator::new();
        let paywall = X402Layer::new(facilitator, offer).paywall_page(PaywallPage::new());
        let app = Router::new().route("/report", get(report.layer(paywall)).layer(payment_cors()));

        // The preflight of a paying page on another origin: 200.
        let preflight = Request::options("/report")
            .header("origin", "https://shop.example")
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "payment-signature")
            .body(Body::empty())?;
        assert_eq!(app.clone().oneshot(preflight).await?.status(), 200);

        // The challenge is readable cross-origin, and so is the paid answer.
        let unpaid = Request::get("/report")
            .header("origin", "https://shop.example")
            .body(Body::empty())?;
        let challenge = app.clone().oneshot(unpaid).await?;
        assert_eq!(challenge.headers()["access-control-allow-origin"], "*");
        let required: PaymentRequired =
            header::decode(challenge.headers()[PAYMENT_REQUIRED].as_bytes())?;
        let payment = header::encode(&SandboxWallet::random().pay(&required)?)?;
        let paid = Request::get("/report")
            .header("origin", "https://shop.example")
            .header(PAYMENT_SIGNATURE, payment)
            .body(Body::empty())?;
        let paid = app.clone().oneshot(paid).await?;
        assert_eq!(paid.status(), 200);
        assert_eq!(paid.headers()["access-control-allow-origin"], "*");

        // A browser that opens the URL gets the HTML 402.
        let opened = Request::get("/report")
            .header("accept", "text/html")
            .body(Body::empty())?;
        let page = app.oneshot(opened).await?;
        assert_eq!(page.status(), 402);
        assert!(
            page.headers()["content-type"]
                .to_str()?
                .starts_with("text/html")
        );
        Ok(())
    }
}

/// "Paid MCP tools": two tools priced on an rmcp server.
mod paid_tools {
    use rmcp::handler::server::tool::{Extension, ToolRouter};
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::{ServerHandler, tool, tool_handler, tool_router};
    use tower_x402::mcp::PaidTools;
    use tower_x402::payment::Payments;
    use tower_x402::{Charge, Facilitator, Offer};
    use tower_x402_sandbox::SandboxFacilitator;
    use x402_wire::{AtomicAmount, UsdcDeployment};

    #[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    struct Text {
        text: String,
    }

    #[derive(Clone)]
    struct Tools {
        tool_router: ToolRouter<Self>,
    }

    #[tool_router]
    impl Tools {
        #[tool(description = "The text, shouted (0.01 USDC)")]
        fn shout(&self, Parameters(Text { text }): Parameters<Text>) -> String {
            text.to_uppercase()
        }

        #[tool(description = "The text's length (0.001 USDC a character, at most 0.10 USDC)")]
        fn count(
            &self,
            Extension(charge): Extension<Charge>,
            Parameters(Text { text }): Parameters<Text>,
        ) -> String {
            let characters = text.chars().count();
            charge.set(AtomicAmount(characters as u128 * 1_000));
            characters.to_string()
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Tools {}

    async fn tools(facilitator: impl Facilitator) -> Result<Tools, Box<dyn std::error::Error>> {
        let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
        let shout = Offer::builder(PaidTools::resource("shout"))
            .usdc(&UsdcDeployment::BASE, "0.01".parse()?, pay_to)
            .build()?;
        let count = Offer::builder(PaidTools::resource("count"))
            .usdc_upto(&UsdcDeployment::BASE, "0.10".parse()?, pay_to)
            .build_for(&facilitator)
            .await?;
        let paid = PaidTools::new(Payments::new(facilitator));
        let router = paid.price(Tools::tool_router(), "shout", shout)?;
        let router = paid.price(router, "count", count)?;
        Ok(Tools {
            tool_router: router,
        })
    }

    #[tokio::test]
    async fn both_tools_are_priced() {
        let tools = tools(SandboxFacilitator::new()).await.unwrap();
        let mut names: Vec<_> = tools
            .tool_router
            .list_all()
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["count", "shout"]);
    }
}
